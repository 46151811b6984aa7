"""The tests whose checks run in child processes (child.py, marked `ocl_child`) run last, and their children start
as soon as collection ends, so that they run beside the rest of the suite; the session's end kills any left."""

from .child import start_children, stop_children


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("ocl_child")]
    if marked:
        items[:] = [item for item in items if not item.get_closest_marker("ocl_child")] + marked


def pytest_collection_finish(session):
    if not session.config.option.collectonly:
        start_children(session.items)


def pytest_sessionfinish(session, exitstatus):
    stop_children()
