"""What the server, the tools and the client share, below all of them (issue 23).

- `config_error`: `ConfigError` / `ConfigFileError` (Kafka's ConfigException): a bad value
  names its key and what is allowed; startup and the tools stop on it.
"""
