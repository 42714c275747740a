"""Waiting for a condition, with a deadline."""
import time


class GaveUp(TimeoutError):
    """poll() gave up: what it waited for did not come in time."""


def poll(fn, ok, what, timeout_s=60, interval_s=0.1):
    """fn() every interval_s seconds until ok(what it returned); -> that. Past
    timeout_s, GaveUp (a TimeoutError): "gave up waiting for <what> after <timeout_s>
    s: <fn's last answer>". A script that would rather exit with the message than
    a traceback catches GaveUp in main (SystemExit(f"name: {e}"))."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = fn()
        if ok(r):
            return r
        if time.monotonic() > deadline:
            raise GaveUp(f"gave up waiting for {what} after {timeout_s:g} s: {r}")
        time.sleep(interval_s)
