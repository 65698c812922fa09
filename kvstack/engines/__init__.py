"""Rendering: Plan -> LaunchSpec (argv, env, files). One registered module per engine/connector."""
