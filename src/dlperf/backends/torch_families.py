"""PyTorch models and trainers for the guide's families (``dlperf.workloads.families``).

Imported on demand by ``torch_backend.build_trainer``, which looks a family's config type
up in ``TRAINER_FACTORIES``. Every trainer runs on its synthetic batch (time per
mini-batch, ``dlperf run``) or on real batches given by ``set_batch`` (``dlperf train``),
and offers, besides the ``Trainer`` interface, what the training loop of
``dlperf.train`` needs: ``default_lr``, ``set_lr``, ``outputs(x)`` (numpy arrays from
which ``dlperf.train`` computes the quality) and, for the GAN, ``generate``; the DBN
adds ``pretrain_step`` and ``end_pretraining``.

Optimisers: SGD with momentum 0.9 for the classifiers, Adam for the recursive net, the
auto-encoders, the VAE and the GAN (betas of Radford et al., 2016 for the GAN), CD-k with
SGD momentum 0.5 for RBMs (Hinton, 2010). ``init_scale`` = "default" keeps PyTorch's own initialisation;
a number s draws every weight matrix, kernel and embedding from N(0, s^2) and zeroes the
biases.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dlperf.backends.base import Trainer, UnsupportedError
from dlperf.workloads import families as fam

EVAL_SEED = 12345  # fixed noise for evaluating the VAE and the GAN: a deterministic measure


def apply_init(model: nn.Module, init_scale: float | str | None) -> None:
    """init_scale s: weights ~ N(0, s^2), biases 0; 'default' leaves PyTorch's init."""
    s = fam.init_scale_value(init_scale)
    if s is None:
        return
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, s)
            else:
                p.zero_()


def _act(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[name]()


def mlp(widths: tuple[int, ...], act: str, last_act: bool = False) -> list[nn.Module]:
    out: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        out.append(nn.Linear(a, b))
        if last_act or i < len(widths) - 2:
            out.append(_act(act) if act != "lrelu" else nn.LeakyReLU(0.2))
    return out


# ----------------------------------------------------------------------------- base
class FamilyTrainer(Trainer):
    """Shared plumbing: synthetic batch, optimisers, FLOP counting without side effects."""

    default_lr: float = 0.05

    def __init__(self, cfg: Any, batch_size: int, device: torch.device):
        self.cfg, self.device, self.batch_size = cfg, device, batch_size
        self._last: torch.Tensor | None = None
        self.x, self.y = self.synthetic(batch_size)

    # --- to be filled in by each family
    def modules(self) -> list[nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def synthetic(self, n: int):
        """Random inputs of the data's shape and range, random labels."""
        x = torch.rand((n, *self.cfg.input_shape()), device=self.device)
        return x, torch.randint(0, fam.CLASSES, (n,), device=self.device)

    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # --- the Trainer interface
    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss(self) -> float:
        return float(self._last) if self._last is not None else float("nan")

    def set_batch(self, x: Any, y: Any) -> None:
        self.x = self._input(x)
        self.y = torch.as_tensor(np.asarray(y), dtype=torch.long, device=self.device)
        self.batch_size = len(self.y)

    def _input(self, x: Any) -> Any:
        """Host data (numpy arrays) as this family's input on the device."""
        return torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device)

    def set_lr(self, lr: float) -> None:
        for opt in self.optimizers():
            for g in opt.param_groups:
                g["lr"] = lr

    def _count_params(self, mods: list[nn.Module]) -> int:
        return sum(p.numel() for m in mods for p in m.parameters() if p.requires_grad)

    def flops_per_step(self) -> float:
        """FlopCounterMode over one real step, then weights, optimiser state and random
        state put back, so counting changes nothing. oneDNN is off while counting: its
        fused RNN kernels are opaque to the counter."""
        saved = copy.deepcopy(
            ([m.state_dict() for m in self.modules()], [o.state_dict() for o in self.optimizers()])
        )
        last = self._last
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as c:
                self.step()
        for m, s in zip(self.modules(), saved[0], strict=True):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers(), saved[1], strict=True):
            o.load_state_dict(s)
        self._last = last
        return float(c.get_total_flops())


def _sgd(mods: list[nn.Module], lr: float, momentum: float = 0.9) -> torch.optim.SGD:
    return torch.optim.SGD([p for m in mods for p in m.parameters()], lr=lr, momentum=momentum)


def _adam(mods: list[nn.Module], lr: float, betas=(0.9, 0.999)) -> torch.optim.Adam:
    return torch.optim.Adam([p for m in mods for p in m.parameters()], lr=lr, betas=betas)


# ----------------------------------------------------------------------------- one network
class SingleModelTrainer(FamilyTrainer):
    """One network and one optimiser, updated by one backward pass of ``compute_loss``."""

    def __init__(
        self,
        cfg: Any,
        model: nn.Module,
        batch_size: int,
        device: torch.device,
        lr: float = 0.05,
        adam: bool = False,
    ):
        self.model = model.to(device)
        apply_init(self.model, cfg.init_scale)
        self.default_lr = lr
        self.opt = _adam([self.model], lr) if adam else _sgd([self.model], lr)
        self.param_count = self._count_params([self.model])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.model]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt]

    def compute_loss(self) -> torch.Tensor:
        raise NotImplementedError

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.compute_loss()
        loss.backward()
        self.opt.step()
        self._last = loss.detach()
        return self._last


class ClassifierTrainer(SingleModelTrainer):
    """Any classifier: softmax cross-entropy; SGD with momentum (or Adam)."""

    def compute_loss(self) -> torch.Tensor:
        return F.cross_entropy(self.model(self.x), self.y)

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"logits": self.model(self._input(x)).cpu().numpy()}


def build_ffn(cfg: fam.FFNConfig) -> nn.Module:
    widths = (cfg.inputs, *(cfg.hidden,) * cfg.depth, fam.CLASSES)
    return nn.Sequential(nn.Flatten(), *mlp(widths, cfg.activation))


def build_cnn(cfg: fam.CNNConfig) -> nn.Module:
    layers: list[nn.Module] = []
    c_in, side = cfg.input_shape()[0], 0
    for c, side, pool in cfg.plan():
        layers += [nn.Conv2d(c_in, c, 3, 1, 1), nn.ReLU()]
        if pool:
            layers.append(nn.MaxPool2d(2))
            side //= 2
        c_in = c
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(c_in * side * side, cfg.hidden),
        nn.ReLU(),
        nn.Linear(cfg.hidden, fam.CLASSES),
    )


class SequenceClassifier(nn.Module):
    """(B, T, F) -> stacked RNN/LSTM -> the last step's hidden state -> class logits."""

    def __init__(self, cfg: fam.RNNConfig):
        super().__init__()
        cell = nn.LSTM if cfg.cell == "lstm" else nn.RNN
        self.rnn = cell(cfg.input_shape()[1], cfg.hidden, cfg.depth, batch_first=True)
        self.fc = nn.Linear(cfg.hidden, fam.CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(x)  # (B, T, H)
        return self.fc(h[:, -1])


# ----------------------------------------------------------------------------- recursive
class TorchTrees:
    """A packed tree batch on the device: per level (nodes, left, right, operator)."""

    def __init__(self, p: fam.PackedTrees, device: torch.device):
        def t(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a, dtype=torch.long, device=device)

        self.nodes = len(p.tokens)
        self.leaves, self.leaf_tokens = t(p.leaves), t(p.tokens[p.leaves])
        self.levels = [
            (t(ix), t(p.left[ix]), t(p.right[ix]), t(p.tokens[ix] - 10)) for ix in p.levels
        ]
        self.roots = t(p.roots)


class TreeNet(nn.Module):
    """One composition cell applied bottom-up, one batched product per tree level."""

    def __init__(self, cfg: fam.RecursiveConfig):
        super().__init__()
        h = cfg.hidden
        self.leaf = nn.Embedding(10, h)
        self.op = nn.Embedding(cfg.ops, h)
        self.compose = nn.Linear(2 * h, h)
        self.fc = nn.Linear(h, fam.CLASSES)

    def forward(self, trees: TorchTrees) -> torch.Tensor:
        state = self.leaf.weight.new_zeros(trees.nodes, self.leaf.embedding_dim)
        state = state.index_copy(0, trees.leaves, self.leaf(trees.leaf_tokens))
        for idx, left, right, op in trees.levels:
            # (n_level, 2H) @ (2H, H): every tree's nodes of this height at once
            h = torch.tanh(self.compose(torch.cat([state[left], state[right]], 1)) + self.op(op))
            state = state.index_copy(0, idx, h)
        return self.fc(state[trees.roots])


class TreeTrainer(ClassifierTrainer):
    def synthetic(self, n: int):
        trees, labels = fam.expression_trees(n, self.cfg.leaves, self.cfg.ops, seed=n)
        return self._input(trees), torch.as_tensor(labels, device=self.device)

    def _input(self, x: Any) -> TorchTrees:
        return TorchTrees(fam.pack_trees(x), self.device)


# ----------------------------------------------------------------------------- reconstruction
class ReconstructionTrainer(SingleModelTrainer):
    """Auto-encoder and deconvolutional net: mean squared reconstruction error, Adam."""

    def __init__(self, cfg: Any, model: nn.Module, batch_size: int, device: torch.device):
        super().__init__(cfg, model, batch_size, device, lr=1e-3, adam=True)

    def compute_loss(self) -> torch.Tensor:
        return F.mse_loss(self.model(self.x), self.x)

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"recon": self.model(self._input(x)).cpu().numpy()}


def build_autoencoder(cfg: fam.AutoencoderConfig) -> nn.Module:
    shape = cfg.input_shape()
    return nn.Sequential(
        nn.Flatten(), *mlp(cfg.widths(), cfg.activation), nn.Sigmoid(), nn.Unflatten(1, shape)
    )


def build_deconv(cfg: fam.DeconvConfig) -> nn.Module:
    w, c = cfg.width, cfg.input_shape()[0]
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(cfg.input_shape()), cfg.code),
        nn.ReLU(),
        nn.Linear(cfg.code, w * 4),
        nn.ReLU(),
        nn.Unflatten(1, (w, 2, 2)),
        nn.ConvTranspose2d(w, w // 2, 4, 2, 1),
        nn.ReLU(),  # 2x2 -> 4x4
        nn.ConvTranspose2d(w // 2, c, 4, 2, 1),
        nn.Sigmoid(),  # 4x4 -> 8x8
    )


# ----------------------------------------------------------------------------- RBM and DBN
class RBM(nn.Module):
    """Binary RBM: E(v, h) = -b.v - c.h - v.W.h (Hinton, 2010, eq. 1)."""

    def __init__(self, visible: int, hidden: int, init_scale: float | str | None):
        super().__init__()
        s = fam.init_scale_value(init_scale)
        self.W = nn.Parameter(torch.randn(visible, hidden) * (0.01 if s is None else s))
        self.b = nn.Parameter(torch.zeros(visible))  # visible biases
        self.c = nn.Parameter(torch.zeros(hidden))  # hidden biases

    def up(self, v: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(v @ self.W + self.c)  # p(h = 1 | v)

    def down(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(h @ self.W.T + self.b)  # p(v = 1 | h)


@torch.no_grad()
def cd_gradient(rbm: RBM, v0: torch.Tensor, k: int):
    """CD-k estimate of the log-likelihood gradient (Hinton, 2002):
    dW = <v h>_data - <v h>_k, with hidden probabilities for h and sampled binary
    visibles along the chain. Returns (dW, db, dc, p(v | h0)), the last for the
    reconstruction error."""
    ph0 = rbm.up(v0)
    h = torch.bernoulli(ph0)
    pv1 = None
    for _ in range(k):
        pv = rbm.down(h)
        pv1 = pv if pv1 is None else pv1
        v = torch.bernoulli(pv)
        ph = rbm.up(v)
        h = torch.bernoulli(ph)
    n = v0.shape[0]
    dW = (v0.T @ ph0 - v.T @ ph) / n
    return dW, (v0 - v).mean(0), (ph0 - ph).mean(0), pv1


def cd_update(rbm: RBM, opt: torch.optim.Optimizer, v0: torch.Tensor, k: int) -> torch.Tensor:
    """One CD-k step: the estimate goes into .grad (negated: the optimiser descends) and
    the optimiser applies it; no autograd. Returns the reconstruction error."""
    dW, db, dc, pv1 = cd_gradient(rbm, v0, k)
    for p, g in ((rbm.W, dW), (rbm.b, db), (rbm.c, dc)):
        p.grad = -g
    opt.step()
    return F.mse_loss(pv1, v0)


class RBMTrainer(FamilyTrainer):
    default_lr = 0.05

    def __init__(self, cfg: fam.RBMConfig, batch_size: int, device: torch.device):
        self.rbm = RBM(cfg.visible, cfg.hidden, cfg.init_scale).to(device)
        self.opt = _sgd([self.rbm], self.default_lr, momentum=0.5)
        self.param_count = self._count_params([self.rbm])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.rbm]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt]

    def step(self) -> torch.Tensor:
        self._last = cd_update(self.rbm, self.opt, self.x.flatten(1), self.cfg.k)
        return self._last

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        v = self._input(x).flatten(1)
        return {"recon": self.rbm.down(self.rbm.up(v)).reshape(len(v), *x.shape[1:]).cpu().numpy()}


class DBNTrainer(FamilyTrainer):
    """Greedy layer-wise RBM pre-training (each RBM on the mean-field activations of the
    ones below), then the weights unrolled into a sigmoid classifier and fine-tuned by
    backpropagation (Hinton, Osindero, Teh, 2006; Hinton & Salakhutdinov, 2006)."""

    default_lr = 0.02  # gentle: a fifth of the 0.1 a sigmoid net trains at from random init
    pretrain_lr = 0.1  # Hinton (2010), sec. 4

    def __init__(self, cfg: fam.DBNConfig, batch_size: int, device: torch.device):
        w = cfg.widths()
        self.rbms = nn.ModuleList(
            RBM(a, b, cfg.init_scale) for a, b in zip(w[:-1], w[1:], strict=True)
        ).to(device)
        self.model = nn.Sequential(nn.Flatten(), *mlp((*w, fam.CLASSES), "sigmoid")).to(device)
        apply_init(self.model, cfg.init_scale)
        self.pretrain_layers = cfg.depth
        self.rbm_opts = [_sgd([r], self.pretrain_lr, momentum=0.5) for r in self.rbms]
        self.opt = _sgd([self.model], self.default_lr)
        pretrain = cfg.phase == "pretrain"
        self.param_count = self._count_params([self.rbms] if pretrain else [self.model])
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.rbms, self.model]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [*self.rbm_opts, self.opt]

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def set_pretrain_lr(self, lr: float) -> None:
        for opt in self.rbm_opts:
            for g in opt.param_groups:
                g["lr"] = lr

    def pretrain_step(self, layer: int) -> torch.Tensor:
        """One CD-k update of RBM ``layer`` on the current batch."""
        with torch.no_grad():
            v = self.x.flatten(1)
            for r in self.rbms[:layer]:
                v = r.up(v)
        self._last = cd_update(self.rbms[layer], self.rbm_opts[layer], v, self.cfg.k)
        return self._last

    @torch.no_grad()
    def end_pretraining(self) -> None:
        """Unroll: each RBM's W and hidden biases become a sigmoid layer's weights."""
        linears = [m for m in self.model if isinstance(m, nn.Linear)]
        for r, lin in zip(self.rbms, linears, strict=False):
            lin.weight.copy_(r.W.T)
            lin.bias.copy_(r.c)

    def step(self) -> torch.Tensor:
        if self.cfg.phase == "pretrain":
            for i in range(len(self.rbms)):
                self.pretrain_step(i)
            return self._last
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        self._last = loss.detach()
        return self._last

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        x = self._input(x)
        return {"logits": self.model(x).cpu().numpy()}


# ----------------------------------------------------------------------------- VAE
class VAE(nn.Module):
    def __init__(self, cfg: fam.VAEConfig):
        super().__init__()
        n, h, z = math.prod(cfg.input_shape()), cfg.hidden, cfg.latent
        self.enc = nn.Sequential(
            nn.Flatten(), *mlp((n, *(h,) * cfg.depth), "relu", True), nn.Linear(h, 2 * z)
        )
        self.dec = nn.Sequential(*mlp((z, *(h,) * cfg.depth), "relu", True), nn.Linear(h, n))

    def forward(self, x: torch.Tensor, eps: torch.Tensor):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * eps  # reparameterisation (Kingma & Welling, 2014)
        return self.dec(z), mu, logvar


def neg_elbo(
    logits: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor
) -> torch.Tensor:
    """Per-example negative ELBO in nats: Bernoulli reconstruction term plus
    KL(N(mu, sigma^2) || N(0, I)) = -1/2 sum(1 + log sigma^2 - mu^2 - sigma^2)
    (Kingma & Welling, 2014, appendix B)."""
    rec = F.binary_cross_entropy_with_logits(logits, x.flatten(1), reduction="none").sum(1)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
    return rec + kl


class VAETrainer(SingleModelTrainer):
    def __init__(self, cfg: fam.VAEConfig, batch_size: int, device: torch.device):
        super().__init__(cfg, VAE(cfg), batch_size, device, lr=1e-3, adam=True)

    def compute_loss(self) -> torch.Tensor:
        eps = torch.randn(len(self.x), self.cfg.latent, device=self.device)
        logits, mu, logvar = self.model(self.x, eps)
        return neg_elbo(logits, self.x, mu, logvar).mean()

    @torch.no_grad()
    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        """Logits from one sample z per example with fixed noise, and q's parameters."""
        x = self._input(x)
        gen = torch.Generator().manual_seed(EVAL_SEED)
        eps = torch.randn(len(x), self.cfg.latent, generator=gen).to(self.device)
        logits, mu, logvar = self.model(x, eps)
        return {
            "logits": logits.cpu().numpy(),
            "mu": mu.cpu().numpy(),
            "logvar": logvar.cpu().numpy(),
        }


# ----------------------------------------------------------------------------- GAN
class GANTrainer(FamilyTrainer):
    """One step: the generator's batch, one discriminator update on it (detached) and a
    real batch, then one generator update through the updated, frozen discriminator
    (non-saturating loss, Goodfellow et al., 2014, sec. 3)."""

    default_lr = 1e-3

    def __init__(self, cfg: fam.GANConfig, batch_size: int, device: torch.device):
        h, n = (cfg.hidden,) * cfg.depth, math.prod(cfg.input_shape())
        self.G = nn.Sequential(
            *mlp((cfg.latent, *h, n), "relu"), nn.Sigmoid(), nn.Unflatten(1, cfg.input_shape())
        ).to(device)
        self.D = nn.Sequential(nn.Flatten(), *mlp((n, *h, 1), "lrelu")).to(device)
        for m in (self.G, self.D):
            apply_init(m, cfg.init_scale)
        self.opt_g = _adam([self.G], self.default_lr, betas=(0.5, 0.999))
        self.opt_d = _adam([self.D], self.default_lr, betas=(0.5, 0.999))
        self.param_count = self._count_params([self.G, self.D])
        self.d_loss = self.g_loss = None
        super().__init__(cfg, batch_size, device)

    def modules(self) -> list[nn.Module]:
        return [self.G, self.D]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt_g, self.opt_d]

    def d_loss_of(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        lr, lf = self.D(real), self.D(fake)
        return F.binary_cross_entropy_with_logits(
            lr, torch.ones_like(lr)
        ) + F.binary_cross_entropy_with_logits(lf, torch.zeros_like(lf))

    def g_loss_of(self, fake: torch.Tensor) -> torch.Tensor:
        lf = self.D(fake)
        return F.binary_cross_entropy_with_logits(lf, torch.ones_like(lf))

    def d_update(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        self.opt_d.zero_grad(set_to_none=True)
        loss = self.d_loss_of(real, fake.detach())
        loss.backward()
        self.opt_d.step()
        return loss.detach()

    def g_update(self, fake: torch.Tensor) -> torch.Tensor:
        self.opt_g.zero_grad(set_to_none=True)
        self.D.requires_grad_(False)  # the G step moves G only: no weight gradients for D
        try:
            loss = self.g_loss_of(fake)
            loss.backward()
        finally:
            self.D.requires_grad_(True)
        self.opt_g.step()
        return loss.detach()

    def step(self) -> torch.Tensor:
        z = torch.randn(len(self.x), self.cfg.latent, device=self.device)
        fake = self.G(z)  # one generator pass serves both updates
        self.d_loss = self.d_update(self.x, fake)
        self.g_loss = self.g_update(fake)
        self._last = self.d_loss + self.g_loss
        return self._last

    @torch.no_grad()
    def generate(self, n: int, seed: int = EVAL_SEED) -> np.ndarray:
        gen = torch.Generator().manual_seed(seed)
        z = torch.randn(n, self.cfg.latent, generator=gen).to(self.device)
        return self.G(z).cpu().numpy()

    def outputs(self, x: Any) -> dict[str, np.ndarray]:
        return {"samples": self.generate(len(x))}


# ----------------------------------------------------------------------------- factories
def _eager(variant: str) -> None:
    if variant != "eager":
        raise UnsupportedError("the guide's families run in PyTorch eager mode only")


def _factory(make: Callable[[Any, int, torch.device], Trainer]) -> Callable[..., Trainer]:
    def factory(
        cfg: Any, batch_size: int, variant: str, device: torch.device, seed: int = 0
    ) -> Trainer:
        _eager(variant)
        torch.manual_seed(seed)
        return make(cfg, batch_size, device)

    return factory


#: config type -> (config, batch_size, variant, device, seed) -> Trainer
TRAINER_FACTORIES: dict[type, Callable[..., Trainer]] = {
        fam.FFNConfig: _factory(lambda c, b, d: ClassifierTrainer(c, build_ffn(c), b, d, lr=0.1)),
        fam.CNNConfig: _factory(lambda c, b, d: ClassifierTrainer(c, build_cnn(c), b, d, lr=0.05)),
        fam.RNNConfig: _factory(
            lambda c, b, d: ClassifierTrainer(c, SequenceClassifier(c), b, d, lr=0.05)
        ),
        # SGD stalls near 73% on the tree task where Adam passes 95% (docs/families.md)
        fam.RecursiveConfig: _factory(
            lambda c, b, d: TreeTrainer(c, TreeNet(c), b, d, lr=3e-3, adam=True)
        ),
        fam.AutoencoderConfig: _factory(
            lambda c, b, d: ReconstructionTrainer(c, build_autoencoder(c), b, d)
        ),
        fam.DeconvConfig: _factory(lambda c, b, d: ReconstructionTrainer(c, build_deconv(c), b, d)),
        fam.RBMConfig: _factory(RBMTrainer),
        fam.DBNConfig: _factory(DBNTrainer),
        fam.VAEConfig: _factory(VAETrainer),
        fam.GANConfig: _factory(GANTrainer),
}
