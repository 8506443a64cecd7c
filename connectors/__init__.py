"""Connectors that move data between Josef (or any Kafka-protocol cluster) and other systems."""
