"""The check logic: what each conformance check does with the engine stand-in and what counts as a failure."""
