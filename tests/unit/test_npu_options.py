"""SuperKernel option schema, validators, version gate and search space (no torch_npu needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sktune.backends._base import OptionSpec
from sktune.backends.npu_option_check import (
    dcci_pattern_matches,
    validate_compile_options,
    validate_options,
    validate_scope_names,
)
from sktune.backends.npu_option_schema import (
    DEBUG,
    FULL_KEY_SET,
    LEGACY_KEY_SET,
    OPTIMIZE,
    SCHEMA,
    TOP_LEVEL_SCHEMA,
    NpuOptionError,
    NpuVersionError,
    parse_version,
    _parse_version_fallback,
    check_torch_npu_version,
)
from sktune.backends.npu_option_space import (
    dcci_options_for,
    only_types,
    optimize_options_from_params,
    search_options,
)
from sktune.errors import SktuneError


def rejects(*args, match: str | list[str], fn=validate_options, **kw) -> str:
    with pytest.raises(NpuOptionError) as info:
        fn(*args, **kw)
    msg = str(info.value)
    for part in [match] if isinstance(match, str) else match:
        assert part in msg, msg
    return msg


# --- the schema -----------------------------------------------------------------------

def test_full_key_set_matches_the_wheel_validator():
    # torch_npu 2.14.0 torch_npu/npu/graphs.py NPUGraph._validate_options, valid_options table
    assert FULL_KEY_SET.optimize_keys == {
        "preload_code", "split_mode", "stream_fusion", "constant_codegen", "auto_op_parallel", "opt_extend",
        "dcci_before_kernel_start", "dcci_after_kernel_end", "dcci_disable_on_kernel",
        "aggressive_opt_strategies", "ubuf_lock_ignore_kernel", "early_start"}
    assert FULL_KEY_SET.debug_keys == {
        "debug_sync_all", "debug_op_exec_trace", "debug_cross_core_sync_check", "debug_extend",
        "debug_per_op_max_core_num"}
    assert LEGACY_KEY_SET.optimize_keys == {"preload_code", "split_mode", "stream_fusion"}
    assert LEGACY_KEY_SET.debug_keys == {"debug_sync_all", "debug_dcci_disable_on_kernel"}


def test_every_key_has_type_default_doc_and_ranges():
    specs = {(s.section, s.name): s for s in SCHEMA}
    assert (specs[(OPTIMIZE, "preload_code")].low, specs[(OPTIMIZE, "preload_code")].high,
            specs[(OPTIMIZE, "preload_code")].default) == (0, 2, 1)
    assert (specs[(OPTIMIZE, "split_mode")].low, specs[(OPTIMIZE, "split_mode")].default) == (1, 4)
    assert specs[(OPTIMIZE, "aggressive_opt_strategies.value_breaker_bypass")].high == 3
    for s in SCHEMA + TOP_LEVEL_SCHEMA:
        assert s.doc and s.kind
        if s.kind == "int":
            assert s.low is not None and s.high is not None and s.low <= s.default <= s.high


@pytest.mark.parametrize("name, changes", [
    ("dcci_before_kernel_start", True), ("dcci_after_kernel_end", True), ("dcci_disable_on_kernel", True),
    ("aggressive_opt_strategies.value_breaker_bypass", True),
    ("aggressive_opt_strategies.task_breaker_bypass", True),
    ("early_start", False), ("auto_op_parallel", False)])
def test_may_change_results_follows_superkernel_md(name, changes):
    spec = next(s for s in SCHEMA if s.name == name)
    assert spec.may_change_results is changes


# --- accepted examples ----------------------------------------------------------------

@pytest.mark.parametrize("opt, dbg", [
    ({"dcci_after_kernel_end": [".*"]}, None),                      # vllm-ascend 2026
    ({"dcci_disable_on_kernel": [".*"]}, None),                     # other users
    ({"dcci_before_kernel_start": [".*GroupedMatmul.*"]}, None),
    ({}, {"debug_per_op_max_core_num": 1}),
    ({"early_start": 1, "auto_op_parallel": 0,
      "aggressive_opt_strategies": {"task_breaker_bypass": 1, "value_breaker_bypass": 0b11,
                                    "event_breaker_bypass": 0}}, None),
    ({"preload_code": 0, "aggressive_opt_strategies": {"event_breaker_bypass": 0b00, "value_breaker_bypass": 0b01,
                                                       "task_breaker_bypass": 0b00}}, None),
    ({"preload_code": 2, "split_mode": 1, "stream_fusion": 0, "constant_codegen": 1,
      "ubuf_lock_ignore_kernel": ["te_Mla-v2_.*"], "opt_extend": "mode=a,b/c: x.y = 1"},
     {"debug_sync_all": 1, "debug_op_exec_trace": 1, "debug_cross_core_sync_check": 1, "debug_extend": "k=v"}),
    (None, None),
])
def test_documented_examples_pass(opt, dbg):
    validate_options(opt, dbg)


def test_full_npugraph_ex_options_pass():
    validate_compile_options({
        "super_kernel_optimize": True, "static_kernel_compile": True, "capture_limit": 64,
        "super_kernel_optimize_options": {"dcci_after_kernel_end": [".*"]},
        "super_kernel_debug_options": {"debug_op_exec_trace": 1}, "frozen_parameter": False,
        "clone_input": True, "remove_noop_ops": True})


# --- rejections -----------------------------------------------------------------------

def test_unknown_key_suggests_closest():
    msg = rejects({"early_strat": 1}, match=["unknown super_kernel_optimize_options key 'early_strat'",
                                              "did you mean 'early_start'?", "dcci_after_kernel_end"])
    assert isinstance(NpuOptionError(msg), SktuneError)
    rejects({"dcci_after_kernel": [".*"]}, match="did you mean 'dcci_after_kernel_end'?")
    rejects({"aggressive_opt_strategies": {"task_breaker": 1}},
            match=["unknown key 'task_breaker'", "did you mean 'task_breaker_bypass'?"])
    rejects(None, {"debug_sync": 1}, match="did you mean 'debug_sync_all'?")


def test_key_in_the_wrong_dict_or_old_name():
    rejects({"debug_sync_all": 1}, match="'debug_sync_all' belongs in super_kernel_debug_options")
    rejects(None, {"debug_dcci_disable_on_kernel": [".*"]},
            match="since torch-npu 2.11 write super_kernel_optimize_options['dcci_disable_on_kernel']")


@pytest.mark.parametrize("value, expect", [
    ((".*",), ["must be a list of str", "got tuple", "accepts only a list", "write ['.*']"]),
    (".*", ["got str", "write ['.*']"]),
    ({".*"}, ["got set"]),
    ([".*", 3], ["[1] must be a str kernel-name pattern, got int 3"]),
    ([], ["empty list", "omit the key"]),
])
def test_list_type_errors(value, expect):
    rejects({"dcci_after_kernel_end": value}, match=["super_kernel_optimize_options['dcci_after_kernel_end']"]
            + expect)


@pytest.mark.parametrize("value, expect", [
    (True, ["got bool True", "string 'True'", "write 1"]),
    ("1", ["got str '1'", "without quotes", "an int in 0..1 (default 0)"]),
    (1.0, ["got float 1.0"]),
])
def test_int_type_errors(value, expect):
    rejects({"early_start": value}, match=["super_kernel_optimize_options['early_start'] must be"] + expect)


def test_type_errors_of_other_kinds():
    rejects({"opt_extend": 3}, match="['opt_extend'] must be a str")
    rejects({"aggressive_opt_strategies": [("task_breaker_bypass", 1)]}, match="must be a dict with int keys")
    rejects({"aggressive_opt_strategies": {"value_breaker_bypass": False}}, match="got bool False")
    rejects([("early_start", 1)], match="super_kernel_optimize_options must be a dict or None, got list")
    rejects({1: 0}, match="keys must be str, got int 1")


@pytest.mark.parametrize("key, value, allowed", [
    ("split_mode", 5, "outside 1..4 (default 4)"), ("split_mode", 0, "outside 1..4"),
    ("preload_code", 3, "outside 0..2 (default 1)"), ("early_start", 2, "outside 0..1 (default 0)"),
    ("stream_fusion", -1, "outside 0..1 (default 1)"),
])
def test_out_of_range_ints_name_the_silent_fallback(key, value, allowed):
    rejects({key: value}, match=[f"['{key}'] = {value} is", allowed, "silently uses the default"])


def test_out_of_range_ints_beyond_c_int_or_negative():
    rejects({"preload_code": 2**31}, match=["outside 0..2", "pybind11 fails to convert it to a C int"])
    rejects({"preload_code": -1}, match=["silently uses the default 1", "wrapping it to a large uint32"])


def test_out_of_range_nested_and_debug():
    rejects({"aggressive_opt_strategies": {"task_breaker_bypass": 2}},
            match=["['task_breaker_bypass'] = 2 is outside 0..1", "silently uses the default 0"])
    rejects({"aggressive_opt_strategies": {"value_breaker_bypass": 4}},
            match=["= 4 is outside 0..3", "accepts any uint32"])
    rejects(None, {"debug_per_op_max_core_num": 2}, match=["super_kernel_debug_options", "outside 0..1"])


@pytest.mark.parametrize("pattern, expect", [
    ("*Matmul", "starts with '*'"),
    ("GroupedMatmul+", "operator '+'"), ("Mat(mul)?", "operator '('"), ("[A-Z]Add", "operator '['"),
    ("^Add$", "operator '^'"), ("Add|Mul", "operator '|'"), (r"\.Add", "operator '\\\\'"),
    ("Add?", "operator '?'"), ("", "empty pattern"), ("   ", "empty pattern"),
    (" .*Add.*", "whitespace"), (".*Add,Mul.*", "contains ','"), ("Mat:mul", "contains ':'"),
    (".**Add", "contains '**'"), ("Matmül", "contains 'ü'"),
])
def test_dcci_patterns_outside_the_runtime_matcher(pattern, expect):
    msg = rejects({"dcci_disable_on_kernel": [".*", pattern]},
                  match=["super_kernel_optimize_options['dcci_disable_on_kernel'][1]", expect,
                         "'.*GroupedMatmul.*'"])
    if "operator" in expect:
        assert "knows only '.' (any character) and 'x*'" in msg and "whole kernel symbol name" in msg


@pytest.mark.parametrize("text, expect", [
    ("", "is empty"), ("novalue", "is not 'key=value"), ("a=1:a=2", "repeated"), ("a=b=c", "is not"),
    ("k=v x", "value 'v x'"), ("k y=v", "key 'k y'"), ("k=v:", "is not"), ("k=" + "v" * 1030, "over 1024"),
])
def test_extend_strings_the_runtime_would_ignore(text, expect):
    rejects({"opt_extend": text}, match=["['opt_extend']", expect])


def test_top_level_options():
    rejects({"super_kernel_optimise": True}, fn=validate_compile_options,
            match=["unknown npugraph_ex option 'super_kernel_optimise'", "did you mean 'super_kernel_optimize'?"])
    rejects({"super_kernel_optimize": 0}, fn=validate_compile_options,
            match=["'super_kernel_optimize' must be True or False", "truthy"])
    rejects({"capture_limit": 0}, fn=validate_compile_options, match=["outside 1..", "ValueError"])
    rejects({"capture_limit": True}, fn=validate_compile_options, match="got bool True")
    rejects({"super_kernel_debug_options": "debug_sync_all=1"}, fn=validate_compile_options,
            match="must be a dict or None")
    rejects({"super_kernel_optimize_options": {"split_mode": 9}}, fn=validate_compile_options,
            match="outside 1..4")


# --- the runtime matcher --------------------------------------------------------------

@pytest.mark.parametrize("pattern, name, hit", [
    (".*", "te_superkernel_0", True), (".*GroupedMatmul.*", "GroupedMatmul_1_mix_aic", True),
    ("GroupedMatmul", "GroupedMatmul_1_mix_aic", False),  # whole-name match
    (".*groupedmatmul.*", "GroupedMatmul_1", False),       # case-sensitive
    ("Add_.*", "Add_12", True), ("a*b", "aaab", True), ("a*b", "b", True), ("*b", "b", False),
    ("Ad.", "Add", True), ("Ad.", "Addd", False),
])
def test_pattern_matcher(pattern, name, hit):
    assert dcci_pattern_matches(pattern, name) is hit


def _cann_match_regex(pattern: str, op_name: str) -> bool:
    """Line-for-line port of CANN SuperKernelOptionsManager::MatchRegex (trim, char check omitted)."""
    m, n = len(op_name), len(pattern)
    if n > 0 and pattern[0] == "*":
        return False

    def matches(i: int, j: int) -> bool:
        if i == 0 or j == 0:
            return False
        return pattern[j - 1] == "." or op_name[i - 1] == pattern[j - 1]

    flag = [[False] * (n + 1) for _ in range(m + 1)]
    flag[0][0] = True
    for i in range(m + 1):
        for j in range(1, n + 1):
            if pattern[j - 1] == "*":
                if j >= 2:
                    flag[i][j] |= flag[i][j - 2]
                    if matches(i, j - 1):
                        flag[i][j] |= flag[i - 1][j]
            elif matches(i, j):
                flag[i][j] |= flag[i - 1][j - 1]
    return flag[m][n]


@settings(max_examples=300, deadline=None)
@given(st.text("ab.*", min_size=1, max_size=6), st.text("ab", max_size=6))
def test_matcher_agrees_with_the_cann_source(pattern, name):
    assert dcci_pattern_matches(pattern, name) == _cann_match_regex(pattern, name)


# --- scope names ----------------------------------------------------------------------

def test_scope_names_accepted():
    validate_scope_names(["layer0", None, "layer0", "full_model", "层" * 85])  # 255 bytes
    validate_scope_names([f"s{i}" for i in range(64)] + [None] * 10)
    validate_scope_names([f"s{i}" for i in range(200)], max_distinct=256)


@pytest.mark.parametrize("names, expect", [
    ([""], ["'' is empty or blank", "use None"]), (["  "], "empty or blank"),
    (["x" * 256], ["256 characters, over 255", "truncate"]),
    (["é" * 128], ["128 characters but 256 bytes in UTF-8", "non-ASCII", "over 255 bytes"]),
    (["default_sk_scope_name"], "reserved"), (["a\x00b"], "NUL"), ([3], "must be a str or None"),
    ([f"s{i}" for i in range(65)], ["65 distinct scope names, over the limit of 64",
                                    "64, 256 or 1024", "EXCEED_SCOPE_MAX"]),
])
def test_scope_names_rejected(names, expect):
    rejects(names, fn=validate_scope_names, match=expect)


def test_scope_limit_is_configurable():
    rejects(["a", "b"], fn=validate_scope_names, max_distinct=1, match="2 distinct scope names")
    rejects(["a"], fn=validate_scope_names, max_distinct=0, match="max_distinct must be >= 1")


# --- version gate ---------------------------------------------------------------------

@pytest.mark.parametrize("version", [
    "2.14.0", "2.13.0", "2.12.0.post3", "2.11.0", "2.11.0.post3", "2.7.1.post11", "2.7.1.post8",
    "2.9.0.post9", "2.9.0.post6", "2.10.0.post7", "2.10.0.post4", "2.12.0+cpu", "3.0.0"])
def test_full_key_set_versions(version):
    ks = check_torch_npu_version(version)
    assert ks.name == "full" and ks.missing == () and ks.version == version


@pytest.mark.parametrize("version", [
    "2.8.0.post5", "2.8.0.post4", "2.10.0", "2.10.0.post2", "2.9.1", "2.9.0.post4", "2.9.0.post2",
    "2.7.1.post6", "2.7.1.post4"])
def test_old_key_set_versions(version):
    ks = check_torch_npu_version(version)
    assert ks.name == "legacy"
    assert f"{OPTIMIZE}.early_start" in ks.missing and f"{OPTIMIZE}.dcci_after_kernel_end" in ks.missing
    assert f"{DEBUG}.debug_op_exec_trace" in ks.missing and f"{OPTIMIZE}.preload_code" not in ks.missing
    validate_options({"split_mode": 2}, {"debug_dcci_disable_on_kernel": [".*Add.*"]}, key_set=ks)
    rejects({"early_start": 1}, key_set=ks,
            match=[f"not accepted by torch-npu {version}", "old SuperKernel key set", "torch-npu >= 2.11.0"])


@pytest.mark.parametrize("version", ["2.9.0", "2.8.0", "2.8.0.post2", "2.7.1", "2.7.1.post2", "2.6.0.post5",
                                     "2.1.0.post17"])
def test_versions_without_superkernel(version):
    with pytest.raises(NpuVersionError, match=f"torch-npu {version} has no SuperKernel API.*>= 2.11.0.*2.7.1.post4"):
        check_torch_npu_version(version)


def test_version_parsers_agree():
    with pytest.raises(NpuVersionError, match="cannot read"):
        check_torch_npu_version("banana")
    for text in ["2.7.1.post11", "2.10.0", "2.12.0+cpu", "2.11", "2.9.0.post9", "2.11.0rc1"]:
        assert _parse_version_fallback(text) == parse_version(text)
    with pytest.raises(NpuVersionError):
        _parse_version_fallback("two.one")


# --- search space ---------------------------------------------------------------------

def test_search_space_domains():
    specs = {s.name: s for s in search_options(["GroupedMatmul", "MatMulV2", "GroupedMatmul"])}
    assert specs["early_start"].choices == (0, 1) and not specs["early_start"].may_change_numerics
    assert specs["auto_op_parallel"].choices == (0, 1) and not specs["auto_op_parallel"].may_change_numerics
    tb = specs["aggressive_opt_strategies.task_breaker_bypass"]
    vb = specs["aggressive_opt_strategies.value_breaker_bypass"]
    assert (tb.choices, tb.may_change_numerics, vb.choices, vb.may_change_numerics) == ((0, 1), True, (0, 1, 2, 3), True)
    dcci = specs["dcci_strategy"]
    assert dcci.choices == ("safe", "none", "disable:GroupedMatmul", "disable:MatMulV2")
    assert dcci.may_change_numerics and dcci.default == "none" and dcci.exact_choice == "safe"
    assert isinstance(dcci, OptionSpec)
    assert {s.name for s in search_options([])} >= {"dcci_strategy"}
    assert search_options([])[-1].choices == ("safe", "none")
    rejects(["aten.add"], fn=search_options, match="cannot go into a dcci pattern")


def test_dcci_strategies_build_valid_options():
    assert dcci_options_for("safe") == {"dcci_after_kernel_end": [".*"]}
    assert dcci_options_for("none") == {}
    assert dcci_options_for("disable:GroupedMatmul") == {"dcci_disable_on_kernel": [".*GroupedMatmul.*"]}
    rejects("unsafe", fn=dcci_options_for, match="unknown dcci strategy 'unsafe'")
    rejects("disable:", fn=dcci_options_for, match="unknown dcci strategy")
    for spec in search_options(["Add", "RmsNorm"]):
        for choice in spec.choices:
            opts = optimize_options_from_params({spec.name: choice})
            validate_options(opts)
    assert optimize_options_from_params({
        "early_start": 1, "aggressive_opt_strategies.task_breaker_bypass": 1,
        "aggressive_opt_strategies.value_breaker_bypass": 2, "dcci_strategy": "safe"}) == {
        "early_start": 1, "aggressive_opt_strategies": {"task_breaker_bypass": 1, "value_breaker_bypass": 2},
        "dcci_after_kernel_end": [".*"]}


def test_only_choices_come_from_gather_class_types():
    """One ``only:`` choice per gather-class type seen, one with all; none without gathers."""
    dcci = {s.name: s for s in search_options(["Add", "GatherV2", "MatMulV2", "ScatterElements"])}["dcci_strategy"]
    only = [c for c in dcci.choices if c.startswith("only:")]
    assert only == ["only:GatherV2", "only:ScatterElements", "only:GatherV2+ScatterElements"]
    assert dcci.exact_choice == "safe" and dcci.default == "none"
    assert [c for c in search_options(["GatherV2", "Add"])[-1].choices if c.startswith("only:")] == ["only:GatherV2"]
    assert not any(c.startswith("only:") for c in search_options(["Add", "MatMulV2", "GroupedMatmul"])[-1].choices)


def test_only_strategies_round_trip_and_validate():
    opts = dcci_options_for("only:GatherV2+IndexAdd")
    assert opts == {"dcci_disable_on_kernel": [".*"], "dcci_after_kernel_end": [".*GatherV2.*", ".*IndexAdd.*"]}
    validate_options(opts)
    assert only_types("only:GatherV2+IndexAdd") == {"GatherV2", "IndexAdd"} and only_types("safe") is None
    # What each kernel gets, by the matcher: a flush after the named types, none elsewhere.
    assert dcci_pattern_matches(opts["dcci_after_kernel_end"][0], "te_GatherV2_1a2b")
    assert not any(dcci_pattern_matches(p, "te_MatMulV2_1a2b") for p in opts["dcci_after_kernel_end"])
    for bad in ("only:", "only:Gather.V2", "only:GatherV2+", "only:A B"):
        rejects(bad, fn=dcci_options_for, match="unknown dcci strategy")
    for choice in search_options(["GatherV2", "IndexAdd", "Add"])[-1].choices:
        validate_options(optimize_options_from_params({"dcci_strategy": choice}))


def test_the_dcci_guard_for_a_culprit_covers_its_gathers_with_the_fewest_types():
    dcci = search_options(["Add", "GatherV2", "IndexAdd", "ScatterElements"])[-1]
    assert dcci.guard_for(["Add", "GatherV2", "MatMulV2"]) == "only:GatherV2"
    assert dcci.guard_for(["GatherV2", "IndexAdd"]) == "only:GatherV2+IndexAdd+ScatterElements"
    assert dcci.guard_for(["Add", "MatMulV2"]) is None  # no gather in the range: nothing to flush
    assert search_options(["Add"])[-1].guard_for(["GatherV2"]) is None  # not in the space: never seeded
    assert dcci.guarded("none") == frozenset() and dcci.guarded("safe") is None  # safe guards all: no guard choice
    assert type(dcci).from_json(dcci.to_json()) == dcci  # the guards cross the worker pipe


def test_search_space_follows_the_key_set():
    """The old key set (e.g. 2.10.0.post2) accepts none of the searched keys: scopes only."""
    legacy = check_torch_npu_version("2.10.0.post2")
    assert legacy.name == "legacy" and search_options(["MatMulV2"], legacy) == []
    assert search_options(["MatMulV2"], LEGACY_KEY_SET) == []
    full = search_options(["MatMulV2"], check_torch_npu_version("2.14.0"))
    assert {s.name for s in full} == {"early_start", "auto_op_parallel", "dcci_strategy",
                                      "aggressive_opt_strategies.task_breaker_bypass",
                                      "aggressive_opt_strategies.value_breaker_bypass"}


@pytest.mark.parametrize("version, disk, keyed, read", [
    ("2.14.0", True, True, True), ("2.13.0", True, True, True), ("2.10.0.post4", True, True, True),
    ("2.15.0", True, True, False), ("2.11.0", True, False, False), ("2.12.0", True, False, False),
    ("2.7.1.post8", True, False, False), ("2.10.0.post2", False, False, True), ("2.9.1", False, False, False),
])
def test_static_cache_rule_by_version(version: str, disk: bool, keyed: bool, read: bool) -> None:
    """docs/npu_api.md "Static kernels": switch the cache off only where the release has the
    switch and its key is not known to hold the option map."""
    from sktune.backends.npu_static_cache import static_cache_rule

    rule = static_cache_rule(version)
    assert (rule.disk_cache, rule.options_in_key, rule.read) == (disk, keyed, read)
    assert rule.disable_per_trial is (disk and not keyed)
    assert rule.describe()


def test_top_level_keys_follow_the_key_set() -> None:
    from sktune.backends.npu_option_schema import LEGACY_NPUGRAPH_EX_KEYS, NPUGRAPH_EX_KEYS

    assert check_torch_npu_version("2.10.0.post2").top_level_keys == LEGACY_NPUGRAPH_EX_KEYS
    assert check_torch_npu_version("2.10.0.post4").top_level_keys == NPUGRAPH_EX_KEYS
    assert "disable_static_kernel_compile_cache" not in LEGACY_NPUGRAPH_EX_KEYS
    assert {"mode", "_vllm_aclnn_static_kernel_sym_index", "_vllm_aclnn_static_kernel_sym_range"} <= NPUGRAPH_EX_KEYS
