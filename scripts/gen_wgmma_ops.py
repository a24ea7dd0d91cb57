#!/usr/bin/env python3
# Prints the generic wgmma wrappers (m64nNk16, f32 accumulators, f16/bf16 operands) for
# runtime/wgmma.cuh: wgmma_ss (A from shared memory) and wgmma_rs (A from registers), N in
# {16, 32, 64, 128, 256}; and wgmma_ss_tf32 (m64nNk8, tf32 operands, both K-major: tf32 has no
# transpose bits), N in {64, 128, 256}.
def block(kind, N, pt):
    R = N // 2
    regs = [f"%{i}" for i in range(R)]
    rl = []
    for i in range(0, R, 16):
        rl.append(", ".join(regs[i:i+16]))
    dlist = '"{"\n' + "\n".join(f'      "{l}{", " if j < len(rl) - 1 else ""}"' for j, l in enumerate(rl)) + '\n      "}, "'
    outs = [f'"+f"(d[{i}])' for i in range(R)]
    ol = ",\n        ".join(", ".join(outs[i:i+8]) for i in range(0, R, 8))
    if kind == "tf32":
        pred = R + 2
        ops = f'"%{R}, %{R+1}, p, 1, 1;\\n}}\\n"'
        ins = '"l"(desc_a), "l"(desc_b), "r"(scale_d)'
    elif kind == "ss":
        pred = R + 2
        ops = f'"%{R}, %{R+1}, p, 1, 1, 0, %{R+3};\\n}}\\n"'
        ins = '"l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB)'
    else:
        pred = R + 5
        ops = f'"{{%{R}, %{R+1}, %{R+2}, %{R+3}}}, %{R+4}, p, 1, 1, %{R+6};\\n}}\\n"'
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB)'
    return (f'    asm volatile(\n'
            f'      "{{\\n .reg .pred p;\\n setp.ne.b32 p, %{pred}, 0;\\n"\n'
            f'      " wgmma.mma_async.sync.aligned.m64n{N}k{8 if pt == "tf32" else 16}.f32.{pt}.{pt} "\n'
            f'      {dlist}\n'
            f'      {ops}\n'
            f'      : {ol}\n'
            f'      : {ins});')
out = []
for kind in ("ss", "rs"):
    for N in (16, 32, 64, 128, 256):
        R = N // 2
        if kind == "ss":
            sig = f"float (&d)[{R}], uint64_t desc_a, uint64_t desc_b, int scale_d"
        else:
            sig = f"float (&d)[{R}], const uint32_t (&a)[4], uint64_t desc_b, int scale_d"
        out.append(f"template <typename T, int TB>\nKILN_DEV void wgmma_{kind}_n{N}({sig}) {{")
        out.append("#if KILN_RT_WGMMA")
        out.append("  if constexpr (IsBf16<T>::value) {")
        out.append(block(kind, N, "bf16"))
        out.append("  } else {")
        out.append(block(kind, N, "f16"))
        out.append("  }")
        out.append("#else\n  __trap();\n#endif\n}")
for N in (64, 128, 256):
    R = N // 2
    out.append(f"KILN_DEV void wgmma_ss_tf32_n{N}(float (&d)[{R}], uint64_t desc_a, uint64_t desc_b, "
               f"int scale_d) {{")
    out.append("#if KILN_RT_WGMMA")
    out.append(block("tf32", N, "tf32"))
    out.append("#else\n  __trap();\n#endif\n}")
print("\n".join(out))
