"""Josef protocol package."""
