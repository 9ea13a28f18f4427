"""The simple indexes: the client, its page parsers and range reads, the catalog, the defaults."""
