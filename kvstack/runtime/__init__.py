"""What runs while kvstack serves: the supervisor of the engine and its helpers, their processes,
readiness and liveness, and the launch specs it runs (the HTTP clients are kvstack/clients)."""
