"""The one table of backends: ours (what lm-eval registers, what ``belief-eval --help`` says of each) and the
lm-eval backends we know something of, with what the rest of the package asks of a backend: whether it shares
prefixes (the cost estimate's units, ``planning.rates``) and whether it needs vLLM installed (``belief-eval``
refuses it before the tasks are built, ``commands.checks``).

Pure: no lm-eval (``hooks.harness.register_backends`` hands ``targets()`` to lm-eval's registry).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """One ``--model`` name and what we know of it."""

    name: str
    #: "module:Class" of a backend of ours, registered lazily (imported when a run asks for it); "" for lm-eval's
    target: str = ""
    #: its line in ``belief-eval --help`` (ours)
    line: str = ""
    #: log-likelihoods computed with prefix sharing (each shared prefix once)
    shares_loglikelihood: bool = False
    #: generation prompts prefilled once per prompt (its samples share the prompt)
    shares_generation: bool = False
    #: it imports vLLM's offline engine when it is built
    needs_vllm: bool = False
    #: its log-likelihoods read vLLM's prefix cache in whole blocks (the estimate counts vllm-shared's passes), not
    #: hf-shared's radix tree
    shares_in_blocks: bool = False
    #: it computes a log-likelihood request's whole sequence, its last token included (vLLM generates one token
    #: after it; a completions server echoes it)
    whole_sequence: bool = False

    @property
    def ours(self) -> bool:
        return bool(self.target)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "hf-shared",
            "belief_tasks.backends.shared:HFSharedPrefixLM",
            "lm-eval's hf with shared prefixes: the same model args and numbers, faster on IC-LKE, BEAR, "
            "BELIEF's sampled answers and MONITOR (docs/backends.md)",
            shares_loglikelihood=True,
            shares_generation=True,
        ),
        Backend(
            "vllm-shared",
            "belief_tasks.backends.vllm_shared:VLLMSharedPrefixLM",
            "lm-eval's vllm whose log-likelihoods read vLLM's prefix cache: the same model args and numbers, "
            "faster on IC-LKE (docs/backends.md)",
            shares_loglikelihood=True,
            shares_generation=True,
            needs_vllm=True,
            shares_in_blocks=True,
        ),
        Backend(
            "vllm-serve-shared",
            "belief_tasks.backends.vllm_served:VLLMServedSharedLM",
            "lm-eval's local-completions against vllm serve, log-likelihoods through its token endpoint "
            "reading its prefix cache (docs/backends_support.md)",
            shares_loglikelihood=True,
            shares_generation=True,
            shares_in_blocks=True,
        ),
        Backend(
            "hf-mlm",
            "belief_tasks.backends.mlm:HFMaskedLM",
            "masked LMs (BERT family): BEAR by pseudo-log-likelihood and the belief_mlm_* tasks (docs/mlm.md)",
        ),
        # lm-eval's own: vLLM's engine prefills a prompt once for its samples (and reads no prefix cache for a
        # log-likelihood: it asks for the prompt's log-probabilities)
        Backend("vllm", shares_generation=True, needs_vllm=True, whole_sequence=True),
        Backend("vllm-vlm", needs_vllm=True),
        Backend("local-completions", whole_sequence=True),
    )
}

#: what an unlisted backend (lm-eval's hf, an API, ...) is: no sharing, no vLLM of its own
OTHER = Backend("")


def backend(name: str | None) -> Backend:
    """The row of ``--model name`` (lm-eval's default ``hf`` when None); ``OTHER``'s defaults where unlisted."""
    return BACKENDS.get(name or "hf", OTHER)


def ours() -> list[Backend]:
    """Our backends, in the help's order."""
    return [b for b in BACKENDS.values() if b.ours]


def targets() -> dict[str, str]:
    """name -> "module:Class" of each backend of ours, for lm-eval's registry."""
    return {b.name: b.target for b in ours()}
