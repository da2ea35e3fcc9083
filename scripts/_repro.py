import subprocess, sys
calls = {
    "neg_scale": "torch.ops.flash_attn_cuda.fwd(q, q, q, -1.0, False)",
    "neg_scale_det": "torch.ops.flash_attn_cuda.fwd(q, q, q, -1.0, False, False)",
    "misaligned": "b = torch.randn(1, 16, 2, 72, device='cuda', dtype=torch.bfloat16)[..., 1:65]; torch.ops.flash_attn_cuda.fwd(b, b, b, 0.125, False)",
    "bwd_bad": "torch.ops.flash_attn_cuda.bwd(q, q, q, q, q, torch.zeros(3, device='cuda'), 0.125, False)",
    "cpu_q": "torch.ops.flash_attn_cuda.fwd(q.cpu(), q, q, 0.125, False)",
}
for name, call in calls.items():
    code = ("import torch, flash_attn_cuda\nq = torch.randn(1, 16, 2, 64, device='cuda', dtype=torch.bfloat16)\n"
            f"try:\n    {call}\n    print('no raise')\nexcept Exception as e:\n    print('raised', type(e).__name__, str(e).splitlines()[0][:100])\n")
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True)
    print(name, "rc", r.returncode, r.stdout.strip(), r.stderr.strip()[-600:] if r.returncode else "")
