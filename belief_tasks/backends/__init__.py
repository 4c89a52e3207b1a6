"""Our lm-eval backends: ``hf-shared`` (prefix sharing) and ``hf-mlm`` (masked LMs).

Importing one installs our harness hooks first (their cache reads, seeded samples and data
parallelism are part of how the backends behave), as ``belief-eval`` does.
"""

from belief_tasks.hooks import harness

harness.install()
