"""Jobs: what every command and pipeline kind runs, between the command line and the apps.

``cli/`` parses options and prints; a job checks its inputs and outputs,
plans (``--dry-run``), runs its stages under the run protocol
(:mod:`distforest.jobs.runs`) and says what it wrote.  See
``docs/design.md`` section 2.
"""
