"""Security: TLS settings and certificates, the cluster's repair key."""
