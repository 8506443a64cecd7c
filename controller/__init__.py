"""Josef controller package."""
