"""Which torch-npu releases may reuse a static-kernel package built under other SuperKernel
options, and so whether a trial must turn npugraph_ex's static-kernel cache off
(``disable_static_kernel_compile_cache=True``). Pure Python, no ``torch_npu`` import.

Read from the wheels' ``npugraph_ex/_acl_concrete_graph/static_kernel.py``
(docs/npu_api.md, "Static kernels"):

- 2.10.0.post4, 2.13.0, 2.14.0: two caches. In the process, an op is compiled once per
  ``<op hash>:<SuperKernel config>`` (``get_compile_dir``); on disk,
  ``static_kernel_compile_outputs/static_kernel_cache/CANN-<cann>_<device>.json`` maps a key
  to a run package. ``_get_static_kernel_cache_key`` hashes the op hashes, then
  ``_get_super_kernel_config_str`` (on/off, and when on the optimize *and* debug option
  maps as sorted JSON), then the determinism flag (2.13.0 and 2.14.0 also the determinism
  level). The option map is in both keys: the cache can stay on.
- 2.10.0.post2 (the newest release with the old key set): no disk cache and no
  ``disable_static_kernel_compile_cache`` key (npugraph_ex raises "Invalid option"); the
  in-process set holds the op hash alone, with no switch. op_compiler gets no option map
  there, only ``--enable_super_kernel``. Nothing for sktune to set.
- Scopes are in neither key: the op hashes come from per-op JSON dumped by running the
  graph eagerly op by op, where the scope markers are no-ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from sktune.backends.npu_option_schema import check_torch_npu_version, parse_version

#: Releases whose static_kernel.py was read (docs/npu_api.md, "Static kernels").
_READ_OPTIONS_IN_KEY = frozenset({(2, 10, 0, 4), (2, 13, 0, 0), (2, 14, 0, 0)})


@dataclass(frozen=True)
class StaticCacheRule:
    """What one torch-npu release's static-kernel caches key on, and what a trial sets."""

    version: str
    disk_cache: bool  # has the on-disk cache and the key that turns it off
    options_in_key: bool  # the SuperKernel option and debug maps are part of the keys
    read: bool  # read from this release's wheel; else inferred (see static_cache_rule)

    @property
    def disable_per_trial(self) -> bool:
        """Trials set ``disable_static_kernel_compile_cache=True``: only where the release has
        the key and its cache might hand back a package built under other options."""
        return self.disk_cache and not self.options_in_key

    def describe(self) -> str:
        if not self.disk_cache:
            return "no on-disk static-kernel cache (op hashes alone, in the process): nothing to turn off"
        if self.options_in_key:
            return "static-kernel cache keyed by ops + SuperKernel options: kept on"
        return "static-kernel cache not known to key the SuperKernel options: turned off for every trial"


def static_cache_rule(version: str) -> StaticCacheRule:
    """The rule for ``torch_npu.__version__``.

    Old key set: no disk cache (read on 2.10.0.post2, the newest such release; the older
    ones predate it). Full key set: 2.10.0.post4+ within 2.10, and 2.13.0 or later, key
    the options (read on 2.10.0.post4, 2.13.0, 2.14.0; later releases assumed to keep
    it). The full-set releases not read (2.11, 2.12, the 2.7.1 / 2.9.0 backports) turn
    the cache off per trial: a fresh static compile costs time, never a wrong measurement.
    """
    key_set = check_torch_npu_version(version)
    (major, minor, micro), post = parse_version(version)
    stamp = (major, minor, micro, post or 0)
    if key_set.name == "legacy":
        return StaticCacheRule(version, False, False, stamp == (2, 10, 0, 2))
    keyed = (2, 10, 0, 4) <= stamp < (2, 11, 0, 0) or stamp >= (2, 13, 0, 0)
    return StaticCacheRule(version, True, keyed, stamp in _READ_OPTIONS_IN_KEY)


__all__ = ["StaticCacheRule", "static_cache_rule"]
