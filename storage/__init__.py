"""Josef storage package."""
