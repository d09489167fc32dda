"""Scripts that run in their own interpreters (``python -S -s FILE`` in the sandbox, ``python -I -S FILE`` for the harness), standard library only.

``la_boot`` and ``la_candidate`` run inside the sandbox before untrusted code; ``la_harness`` is the
trusted test harness, and ``la_runner`` its pytest/unittest collection and selection; ``la_wire`` is
the plain-data format between them, and ``la_handles`` the handles by which the tests use instances
of the program's own classes (``Solution().twoSum(...)``); ``la_watchdog`` caps the
memory of a sandbox that has no cgroup, from outside it. This directory is all the
sandbox sees of the package (mounted read-only), and each script puts it first on ``sys.path``, so
no file here may share a name with a standard-library module.
"""
