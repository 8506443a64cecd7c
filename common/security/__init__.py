"""Kafka's client-and-server security pieces (its ``org.apache.kafka.common.security``): JAAS
config parsing, SCRAM, SSL contexts from ``ssl.*`` settings."""
