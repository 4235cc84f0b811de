"""`harmony env`: print the environment record that every run carries."""
import json


def add_arguments(p):
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])


def main(args) -> int:
    from harmony.metrics import env_record, hardware_tag
    rec = env_record(args.device, args.precision)
    rec["hardware_tag"] = hardware_tag(rec)
    print(json.dumps(rec, indent=1))
    return 0
