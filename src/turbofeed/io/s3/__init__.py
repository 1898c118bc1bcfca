"""S3-compatible object storage: the client (:mod:`.client`, :mod:`.transfers`), its
configuration and counters (:mod:`.config`) and errors (:mod:`.errors`), ``s3://``
specs to shard URLs (:mod:`.urls`), the node's shard cache (:mod:`.cache`), and
``s3://`` tar shards as sources (:mod:`.shards`)."""
