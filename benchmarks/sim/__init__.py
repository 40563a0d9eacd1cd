"""Simulated runs and repositories that the statistical and scale benchmarks measure with, and that the tests of
those claims reuse (tests import from here; a benchmark imports no test helper):

- `results`: the ONE Result factory (`make_result`: a complete, valid result as the harness writes one; every
  other builder here passes its own fields to it): site-style submissions (`site_result`, `seeds`), compare's
  log-normal runs (`simulated_result`, `noisy_runs`), and `write_all`;
- `ab`: throughput step times of two commits with a planted change (`simulate`, `throughput_result`, `write_sides`);
- `bisect`: a commit range with planted changes and its comparator; `rcp`: RCP-guard detection rates;
- `git_repo`: the one throw-away git repository of this project's code, at two commits (`make_repo`, the A/B gate)
  or over N commits (`make_range_repo`, bisect).
"""
