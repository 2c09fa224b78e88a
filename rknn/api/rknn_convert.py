"""``python -m rknn.api.rknn_convert -t rk3588 -i model_config.yml -o out/`` (seed 002 §3.1.6)."""
from openrknn.cli.rknn_convert import main

if __name__ == "__main__":
    raise SystemExit(main())
