"""Josef broker package."""
