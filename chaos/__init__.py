"""chaos layer."""
