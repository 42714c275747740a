# The example project's tests (project/) run in a vendored copy, in the
# client-library venv: `conformance/testing/run`. The repository's own
# `python3 -m pytest` leaves them out.
collect_ignore = ["project"]
