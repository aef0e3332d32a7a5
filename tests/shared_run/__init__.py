"""One suite run shared by the project's self-tests: what each asks (plan), how one process serves them all
(selection, keywords), and the session's runs (runner)."""
