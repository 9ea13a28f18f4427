"""The simple indexes: what an index answers (protocol), the client (simple) with its page
parsers and range reads, the catalog of recorded answers, and which indexes a run asks
(defaults)."""
