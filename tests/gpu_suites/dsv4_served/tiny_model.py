"""The suite's tiny DeepSeek sparse-attention model: a config and a tokenizer, no weights.

vLLM 0.25.1 serves DeepSeek-V3.2 (``DeepseekV32ForCausalLM``) through the same
``SparseAttnIndexer`` that the patch changes and DeepSeek-V4 uses. The sizes that the
kernels fix stay real (MLA: kv_lora_rank 512, rope 64, 64 query heads for FlashMLA's
sparse kernels; the indexer: 64 heads of 128, ``index_topk`` 2048, so the top-k selects
for real only above 2,048 tokens of context, as on the served model); everything else is
small (two dense layers, hidden size 1024), and ``load_format="dummy"`` gives the weights.
The tokenizer is a word-level one made here with ``tokenizers`` (token ``t<i>`` for id i).
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 4096
INDEX_TOPK = 2048

CONFIG = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "vocab_size": VOCAB,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 2,
    "moe_layer_freq": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 256,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "index_topk": INDEX_TOPK,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
}
SPECIAL = ["<s>", "</s>", "<unk>"]


def write_model(out: Path) -> Path:
    """Write config.json and a word-level tokenizer into ``out``; return it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1, sort_keys=True))
    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 16384,
    }, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": 1}, indent=1))
    return out


def prompt_ids(length: int, seed: int) -> list[int]:
    """A fixed prompt of ``length`` ordinary token ids (no special tokens)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(len(SPECIAL), VOCAB) for _ in range(length)]
