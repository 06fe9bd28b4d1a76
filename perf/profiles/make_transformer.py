#!/usr/bin/env python3
"""Writes perf/profiles/gpt2_small.csv: a transformer profile for train_emu and prioccl_sim,
derived from GPT-2 small's layer shapes (not measured on a GPU).

    perf/profiles/make_transformer.py > perf/profiles/gpt2_small.csv

GPT-2 small: 12 blocks, width 768, 12 heads, 1,024 positions, a 50,257-token vocabulary whose
embedding the output layer shares (124.4 M parameters). Batch 8 sequences of 1,024 tokens.
Each layer's forward time is its floating-point operations at SUSTAINED_FLOPS:
  - a matrix of n parameters applied to T tokens: 2 n T;
  - attention's two products (scores, then their weighted sum): 2 * 2 * S * d per token;
  - backward: twice the forward (the gradients of the inputs and of the weights).
The output layer (the embedding's transpose) is a layer of its own with no parameters: its
gradient lands in the embedding's, which is complete only when backward reaches the first
layer, so the embedding's op is the last gradient backward produces and the first the next
forward needs (P3's hardest case).
"""

SUSTAINED_FLOPS = 40e12  # a V100-class GPU in mixed precision, about a third of its peak
BATCH, SEQ, WIDTH, BLOCKS, VOCAB = 8, 1024, 768, 12, 50257
TOKENS = BATCH * SEQ


def ms(flops):
    return flops / SUSTAINED_FLOPS * 1e3


def row(name, params, fwd_ms, bwd_ms):
    print(f"{name},{params},{fwd_ms:.3f},{bwd_ms:.3f}")


def main():
    d = WIDTH
    print("# derived from GPT-2 small's layer shapes (perf/profiles/make_transformer.py): batch "
          f"{BATCH} x {SEQ} tokens, {SUSTAINED_FLOPS / 1e12:.0f} TFLOP/s sustained, backward = "
          "2 x forward")
    print(f"# columns: layer (forward order), params (elements), fwd_ms, bwd_ms at batch {BATCH}")
    print("layer,params,fwd_ms,bwd_ms")
    embedding = VOCAB * d + SEQ * d  # tokens and positions; lookups cost next to nothing
    row("000_Embedding", embedding, 0.05, 0.10)
    attn_matrices = d * 3 * d + d * d
    attn_params = attn_matrices + 3 * d + d + 2 * d  # biases, and the block's first layer norm
    attn_flops = 2 * attn_matrices * TOKENS + 2 * 2 * SEQ * d * TOKENS
    mlp_matrices = d * 4 * d + 4 * d * d
    mlp_params = mlp_matrices + 4 * d + d + 2 * d  # biases, and the second layer norm
    mlp_flops = 2 * mlp_matrices * TOKENS
    n = 1
    for b in range(BLOCKS):
        row(f"{n:03d}_Block{b}Attention", attn_params, ms(attn_flops), 2 * ms(attn_flops))
        row(f"{n + 1:03d}_Block{b}MLP", mlp_params, ms(mlp_flops), 2 * ms(mlp_flops))
        n += 2
    row(f"{n:03d}_LayerNorm", 2 * d, 0.05, 0.10)
    head_flops = 2 * VOCAB * d * TOKENS
    row(f"{n + 1:03d}_OutputTiedToEmbedding", 0, ms(head_flops), 2 * ms(head_flops))


if __name__ == "__main__":
    main()
