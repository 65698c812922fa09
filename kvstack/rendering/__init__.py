"""Every command's human output in one place: the rich tables, panels and event lines of plan, serve,
validate, doctor, bench, the trace replay and tune. Use-case packages return data and print nothing;
the CLI hands that data here. Numbers are formatted by ``kvstack.units``."""
