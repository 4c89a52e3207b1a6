"""Every benchmark of the project: the measurements docs/benchmarks.md (and the pages it links to) quote, run by one
runner from the checkout's root:

    python -m benchmarks --list              # every benchmark, one line each
    python -m benchmarks NAME [options]      # one benchmark (``NAME --help``: its options)

``workloads.py`` holds what the benchmarks run (the model, the bundled sample and the real datasets, each probe's
requests as our tasks send them, the sizes they share), ``measure.py`` how they measure it (clocks, a child
process's wall, CPU and peak memory, a process tree's peak memory, rounds in rotating order, two arms' outputs
compared) and ``counting.py`` what a backend asks of the device (``engines --count``). Every other module is one
benchmark, named in ``BENCHMARKS``, with a ``main(argv)``. Not installed with the package: nothing of
``belief_tasks`` imports it (docs/architecture.md).
"""

#: the benchmarks, in the order ``--list`` shows them: the module of that name in this folder runs each one
BENCHMARKS = (
    "shared",
    "engines",
    "served",
    "hf_sampling",
    "float_noise",
    "iclke",
    "monitor_cost",
    "mlm",
    "belief_icl",
    "scale",
    "scale_costs",
    "answer_cache",
    "budget",
    "profile",
    "agreement_real",
    "iclke_eic_agreement",
    "memory_owners",
    "log_sizes",
    "flop_shares",
    "tokenising",
)
#: the modules every benchmark may use, which run nothing themselves
HELPERS = ("workloads", "measure", "counting")
