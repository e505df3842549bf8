"""Trained / total parameters per piece, as Houlsby et al. report them (Tables 1-2)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class ParameterRow:
    piece: str
    kind: str
    total: int
    trainable: int


@dataclass(frozen=True)
class ParameterReport:
    rows: tuple[ParameterRow, ...]
    encoder_total: int

    @property
    def total(self) -> int:
        return sum(row.total for row in self.rows)

    @property
    def trainable(self) -> int:
        return sum(row.trainable for row in self.rows)

    def row(self, piece: str) -> ParameterRow:
        return next(r for r in self.rows if r.piece == piece)

    def to_markdown(self) -> str:
        lines = ["| piece | kind | parameters | trainable | % of encoder |", "|---|---|---:|---:|---:|"]
        for row in self.rows + (ParameterRow("total", "", self.total, self.trainable),):
            share = 100.0 * row.total / self.encoder_total if self.encoder_total else 0.0
            lines.append(f"| {row.piece} | {row.kind} | {row.total:,} | {row.trainable:,} | {share:.3f}% |")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()


def _count(parameters: Iterable[nn.Parameter]) -> tuple[int, int]:
    parameters = list(parameters)
    return sum(p.numel() for p in parameters), sum(p.numel() for p in parameters if p.requires_grad)


def build_parameter_report(
    encoder: Iterable[nn.Parameter], pieces: Iterable[tuple[str, str, Iterable[nn.Parameter]]]
) -> ParameterReport:
    """The report of the encoder's pretrained `encoder` parameters and of each (name, kind, parameters) piece."""
    rows = [ParameterRow("encoder", "pretrained", *_count(encoder))]
    rows += [ParameterRow(name, kind, *_count(parameters)) for name, kind, parameters in pieces]
    return ParameterReport(tuple(rows), rows[0].total)
