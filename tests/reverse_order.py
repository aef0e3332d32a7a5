"""A pytest plugin for the project's self-tests: runs the collected tests in reverse order (``-p`` it)."""

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items):
    result = yield  # after every other plugin's ordering, kvconform's included
    items.reverse()
    return result
