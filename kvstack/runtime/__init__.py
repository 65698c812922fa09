"""What runs while kvstack serves: supervision, the streaming client, Prometheus metrics."""
