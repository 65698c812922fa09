"""The command line: one module per command. Parse, call one core function, render."""
