"""Security: TLS settings and certificates (``tls``, ``certs``), the cluster's repair key (``repair_key``, ``repair_store``)."""
