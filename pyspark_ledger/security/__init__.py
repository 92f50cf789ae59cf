"""Security: TLS settings and certificates (``tls``, ``certs``) and the cluster's repair key (``repair_key``)."""
