"""recovery layer."""
