"""The canary: probes asked again while serving, each answer judged against a recompute."""
