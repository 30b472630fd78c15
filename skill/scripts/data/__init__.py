"""data: the fixed-length training rows every run of a campaign trains on (``attune rows``).

* ``tokenize``: JSONL or Parquet records (chat ``messages``, or ``prompt``/``response`` pairs) to
  token ids and loss masks, through the tokenizer's chat template.
* ``pack``: the over-long rule, and deterministic best-fit packing of documents into rows.
* ``rows``: ``build`` (records to a rows Parquet file), the Parquet layout and metadata, and
  ``rows_sha256``, the hash of a canonical byte encoding of the rows.
* ``check``: verify a rows file: lengths, dtypes, token ids, masks, boundaries and the hash.
* ``rollout``: slime rollout dumps (``--save-debug-rollout-data``) to rows and back
  (``--load-debug-rollout-data``), and the rows_sha256 of a dump.
* ``megatron``: the dataset a Megatron-LM job reads the rows through (``data/MEGATRON.md``).

The format and the hash are documented in ``data/README.md``. pyarrow and transformers (with
jinja2 for chat templates) are the ``data`` extra and are imported only when used: without them
``attune rows`` says ``pip install -e '.[data]'`` and exits 2.
"""
