"""Our lm-eval backends (``hf-shared``, ``hf-mlm``, ``vllm-shared``, ``vllm-serve-shared``) and their plans.

``registry``: the one table of backends (ours and the lm-eval ones we know something of), pure, read by the
command line, the cost estimate and the harness glue. lm-eval finds a backend of ours once
``belief_tasks.install()`` has registered it (``belief-eval``, a task of ours and the backends' users call it);
importing a module here changes nothing in lm-eval.
"""
