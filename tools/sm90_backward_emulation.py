"""CPU check of the index arithmetic of kernels/flash_attention_sm90_backward.cu.

A line-by-line transcription of the Hopper backward's tiling (CTAs, warpgroups, steps over query or key
tiles, causal first tile and tile counts), its per-thread masks and statistics indexing (the wgmma m64nNk16
accumulator fragment: element 4 j + i of lane l in warp w is row 16 w + l / 4 + 8 (i >> 1), column
8 j + 2 (l % 4) + (i & 1)), the split columns of head dim 256 and the stores, with exact float64 products
in place of wgmma, against dense float64 gradients. It checks what the kernel computes where, not the
hardware (descriptors, TMA, barriers: the GPU tests do). Run after changing the kernel's indexing:
    python3 tools/sm90_backward_emulation.py      (about a minute; exits 1 on a mismatch)
"""
import itertools
import math

import numpy as np
def rows(x, start, n, T):  # x (T, d) -> (n, dPad) zero-filled past T
    out = np.zeros((n, x.shape[1]))
    hi = min(T, start + n)
    if hi > start: out[:hi-start] = x[start:hi]
    return out
def cfg(d):
    dPad = 64 if d <= 64 else 128 if d <= 128 else 256
    split = d > 128
    return dPad, split, (64 if split else 128), (dPad//2 if split else dPad)
def frag():  # (warp, lane, e) -> local (row, col) of a 64 x 64 accumulator
    for warp in range(4):
        for lane in range(32):
            yield warp, lane
def store(outs, first, head, col0, accCols, d, split, T):
    """The consumers' stores: for each (out, acc, factor) of outs, accumulator row lr = 16 w + l / 4 + 8 r times
    factor into out[first + lr, head, col0 + column]; tokens past T and padded columns (past d, unsplit) are never
    written."""
    for warp, lane in frag():
        for r in range(2):
            lr = 16*warp + lane//4 + 8*r; token = first + lr
            if token >= T: continue
            for jc in range(accCols//8):
                if (not split) and 8*jc >= d: continue
                for i in range(2):
                    lcol = 8*jc + 2*(lane % 4) + i
                    for out, acc, factor in outs:
                        out[token, head, col0 + lcol] = acc[lr, lcol]*factor
def key_pass(q, k, v, dy, lse, D, T, H, G, d, causal):
    dPad, split, kOwn, accCols = cfg(d); Hkv = H // G; scale = 1/math.sqrt(d); log2e = 1.4426950408889634
    sl2 = scale*log2e
    dk = np.full((T, Hkv, d), np.nan); dv = np.full((T, Hkv, d), np.nan)
    pad = lambda x: np.pad(x, ((0,0),(0,dPad-d)))
    for kv in range(Hkv):
        for bx in range((T + kOwn - 1)//kOwn):
            key0 = bx*kOwn; qt = (T + 63)//64; first = key0//64 if causal else 0
            per = qt - first; steps = G*per
            for wg in range(2):
                row0 = 0 if split else 64*wg; col0 = accCols*wg if split else 0
                dkAcc = np.zeros((64, accCols)); dvAcc = np.zeros((64, accCols))
                K = rows(pad(k[:, kv]), key0+row0, 64, T); V = rows(pad(v[:, kv]), key0+row0, 64, T)
                wgKey0 = key0 + row0
                for j in range(steps):
                    h = kv*G + j//per; q0 = (first + j % per)*64
                    Q = rows(pad(q[:, h]), q0, 64, T); dO = rows(pad(dy[:, h]), q0, 64, T)
                    S = K @ Q.T; dP = V @ dO.T
                    P = np.zeros((64,64)); dS = np.zeros((64,64))
                    masked = (causal and q0 < wgKey0 + 63) or q0 + 64 > T
                    for warp, lane in frag():
                        row = row0 + 16*warp + lane//4; myKey = key0 + row; column = 2*(lane % 4)
                        end = T - q0 - column; visible = myKey - q0 - column
                        for c in range(16):
                            offset = 8*(c//2) + (c & 1); inside = offset < end
                            idx = q0 + column + offset
                            lse2 = lse[h, idx]*log2e if inside else 0.0
                            rowD = D[h, idx] if inside else 0.0
                            for r in range(2):
                                lr = 16*warp + lane//4 + 8*r; lc = 8*(c//2) + column + (c & 1)
                                pe = 2.0**(S[lr, lc]*sl2 - lse2)
                                if masked and ((not inside) or (causal and offset < visible + 8*r)): pe = 0.0
                                P[lr, lc] = pe; dS[lr, lc] = pe*(dP[lr, lc] - rowD)
                    dvAcc += P @ dO[:, col0:col0+accCols]; dkAcc += dS @ Q[:, col0:col0+accCols]
                store(((dv, dvAcc, 1.0), (dk, dkAcc, scale)), key0 + row0, kv, col0, accCols, d, split, T)
    return dk, dv
def query_pass(q, k, v, dy, lse, D, T, H, G, d, causal):
    dPad, split, kOwn, accCols = cfg(d); scale = 1/math.sqrt(d); log2e = 1.4426950408889634; sl2 = scale*log2e
    dq = np.full((T, H, d), np.nan); pad = lambda x: np.pad(x, ((0,0),(0,dPad-d)))
    ntiles = (T + kOwn - 1)//kOwn
    for h in range(H):
        for bx in range(ntiles):
            qTile = ntiles - 1 - bx if causal else bx; query0 = qTile*kOwn
            keyTiles = (T + 63)//64
            tiles = min(keyTiles, (query0 + kOwn - 1)//64 + 1) if causal else keyTiles
            for wg in range(2):
                row0 = 0 if split else 64*wg; col0 = accCols*wg if split else 0
                Q = rows(pad(q[:, h]), query0+row0, 64, T); dO = rows(pad(dy[:, h]), query0+row0, 64, T)
                wgQuery0 = query0 + row0; dqAcc = np.zeros((64, accCols))
                for j in range(tiles):
                    k0 = j*64; K = rows(pad(k[:, h//G]), k0, 64, T); V = rows(pad(v[:, h//G]), k0, 64, T)
                    S = Q @ K.T; dP = dO @ V.T; dS = np.zeros((64,64))
                    masked = (causal and k0 + 63 > wgQuery0) or k0 + 64 > T
                    for warp, lane in frag():
                        row = row0 + 16*warp + lane//4
                        for e in range(32):
                            r = (e >> 1) & 1; key = k0 + 8*(e//4) + 2*(lane % 4) + (e & 1)
                            query = query0 + row + 8*r
                            lse2 = lse[h, query]*log2e if query < T else 0.0
                            rowD = D[h, query] if query < T else 0.0
                            lr = 16*warp + lane//4 + 8*r; lc = key - k0
                            pe = 2.0**(S[lr, lc]*sl2 - lse2)
                            if masked and (key >= T or (causal and key > query0 + row + 8*r)): pe = 0.0
                            dS[lr, lc] = pe*(dP[lr, lc] - rowD)
                    dqAcc += dS @ K[:, col0:col0+accCols]
                store(((dq, dqAcc, scale),), query0 + row0, h, col0, accCols, d, split, T)
    return dq
def reference(q, k, v, dy, T, H, G, d, causal):
    scale = 1/math.sqrt(d); dq = np.zeros((T,H,d)); dk = np.zeros((T,H//G,d)); dv = np.zeros((T,H//G,d))
    lse = np.zeros((H,T)); D = np.zeros((H,T))
    for h in range(H):
        kk, vv = k[:, h//G], v[:, h//G]
        s = q[:, h] @ kk.T * scale
        if causal: s = np.where(np.tril(np.ones((T,T))) > 0, s, -np.inf)
        m = s.max(1, keepdims=True); l = np.exp(s - m).sum(1, keepdims=True); L = m + np.log(l)
        P = np.exp(s - L); y = P @ vv
        Dh = (dy[:, h]*y).sum(1); dP = dy[:, h] @ vv.T; dS = P*(dP - Dh[:, None])
        dq[:, h] = dS @ kk * scale; dk[:, h//G] += dS.T @ q[:, h] * scale; dv[:, h//G] += P.T @ dy[:, h]
        lse[h] = L[:, 0]; D[h] = Dh
    return dq, dk, dv, lse, D
rng = np.random.default_rng(0)
worst = 0
for T, d, G, causal in itertools.product([1, 63, 65, 130, 200], [64, 80, 256], [1, 2], [False, True]):
    H = 2
    q = rng.uniform(-2, 2, (T, H, d)); k = rng.uniform(-1, 1, (T, H//G, d)); v = rng.uniform(-1, 1, (T, H//G, d))
    dy = rng.uniform(-1, 1, (T, H, d))
    dq, dk, dv, lse, D = reference(q, k, v, dy, T, H, G, d, causal)
    edk, edv = key_pass(q, k, v, dy, lse, D, T, H, G, d, causal)
    edq = query_pass(q, k, v, dy, lse, D, T, H, G, d, causal)
    err = max(np.abs(edq - dq).max(), np.abs(edk - dk).max(), np.abs(edv - dv).max())
    worst = max(worst, err) if np.isfinite(err) else np.inf  # NaN: an output element left unwritten
    print(T, d, G, causal, '%.1e' % err, flush=True)
print('worst', worst)
raise SystemExit(0 if worst < 1e-12 else 1)
