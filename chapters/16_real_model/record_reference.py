"""Records chapter 16's reference: token ids and sentence embeddings of a fixed set of texts, computed by the
real reference implementation (sentence-transformers on PyTorch, CPU, float32) from the same model files.

Run once, from the checkout, in a virtual environment with sentence-transformers installed:
  build/ref-venv/bin/python chapters/16_real_model/record_reference.py build/models/all-MiniLM-L6-v2 \
      tests/data/16_real_model_reference.txt
The output is three lines per text: "text: ...", "ids: ...", "embedding: ..." (384 values, %.9g).
"""
import sys

import torch
from sentence_transformers import SentenceTransformer

TEXTS = [
    "I finished that book; it was great.",
    "The cat sat on the mat; it was tired.",
    "Xiao Ming has a cat; it is lovely.",
    "Attention is all you need.",
    "Café déjà vu: naïve résumé, ÉCOLE!",
    "猫坐在垫子上，它很累。",
    "Self-attention lets every token look at every other token (in O(n²) time).",
    "Don't panic -- it's only 42 tokens, isn't it?",
    "unaffable supercalifragilisticexpialidocious",
    "A",
]


def main(model_dir, out_path):
    torch.set_num_threads(1)
    model = SentenceTransformer(model_dir, device="cpu")
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("# " + " ".join(["build/ref-venv/bin/python"] + sys.argv) + "\n")
        out.write(f"# sentence-transformers on torch {torch.__version__}, CPU, float32\n")
        for text in TEXTS:
            ids = model.tokenizer(text)["input_ids"]
            emb = model.encode([text], convert_to_numpy=True)[0]
            out.write(f"text: {text}\n")
            out.write("ids: " + " ".join(str(i) for i in ids) + "\n")
            out.write("embedding: " + " ".join(f"{v:.9g}" for v in emb.tolist()) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
