"""File formats and durable writes."""
