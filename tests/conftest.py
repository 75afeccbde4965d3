import os

import pytest
from hypothesis import HealthCheck, Verbosity, settings

# dev: quick and random; ci: derandomized and bounded so the suite stays within minutes on
# 2 cores; deep: many random examples (a fresh seed each run, printed on failure), for the
# numerics in CI (.ci/run); debug: verbose. Choose with HYPOTHESIS_PROFILE.
settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=20,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("debug", max_examples=10, deadline=None, verbosity=Verbosity.verbose)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU visible to CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
