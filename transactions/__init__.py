"""transactions layer."""
