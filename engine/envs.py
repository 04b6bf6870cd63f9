"""Behaviour-modelling environments: a family of small grid mazes with a synthetic human.

Levels
    A level is a ``size x size`` grid maze generated from its own seed
    (``numpy.random.default_rng([family_seed, level_index])``), so a family is fully
    determined by ``(name, n_levels, size, seed)`` and nothing is ever downloaded.
    Walls are dropped at random and every cell unreachable from the goal becomes a
    wall, so every free cell can reach the goal. States are grid cells
    (``state = row * size + col``), so ``S = size * size`` for every level; walls and
    the goal are not real decision states (``state_mask`` is False there).
    Actions: 0 up, 1 right, 2 down, 3 left; bumping into a wall or the border
    leaves the agent in place.

Human profile (per level)
    Boltzmann-rational over optimal Q-values: value iteration with a unit step
    cost (gamma = 1, i.e. ``Q*(s, a) = -(1 + shortest distance to goal after a)``),
    then ``pi_human(a|s) proportional to exp((Q*(s, a) + b_a) / tau)`` with a per-level temperature
    ``tau`` in [0.35, 1.0] and per-level action biases ``b_a ~ N(0, 0.4)`` (the
    human's idiosyncrasies). Rows of padded/terminal states are uniform.

Reward and its scaling
    ``r = (1 - alpha) * r_task + alpha * h(s, a)`` where

    * ``r_task = +1`` when the move reaches the goal, else ``-STEP_COST`` (0.02);
    * ``h(s, a) = max(log pi_human(a|s), LOG_FLOOR) / |LOG_FLOOR|`` with
      ``LOG_FLOOR = log(1e-3)``.

    ``h`` is the human log-likelihood floored at log(1e-3) (so one very un-human
    action cannot dominate a return) and divided by the floor's magnitude, which
    maps it into [-1, 0]. Both terms are therefore per-step quantities in [-1, 1]:
    at ``alpha = 0.5`` one maximally un-human step costs as much as reaching the
    goal earns. ``info`` carries the unscaled parts (``r_task``, ``log_pi_human``).

Observation
    ``float32[3 * S]``: one-hot agent cell, wall map, one-hot goal cell. It is a
    pure function of ``(level, state)``; ``LevelFamily.observations`` tabulates it so
    behaviour kernels of a policy can be evaluated on every state at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "ENV_ID",
    "LOG_FLOOR",
    "STEP_COST",
    "BehaviourEnv",
    "Demos",
    "LevelFamily",
    "human_term",
    "make_behaviour_env",
    "make_family",
]

ENV_ID = "phantom/BehaviourMaze-v0"
STEP_COST = 0.02
GOAL_REWARD = 1.0
LOG_FLOOR = float(np.log(1e-3))
N_ACTIONS = 4
# (d_row, d_col) for up, right, down, left
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int64)
FAMILY_NAMES = ("maze", "open")


class Demos(NamedTuple):
    """Padded human demonstrations; ``mask`` is False on padding steps."""

    level: np.ndarray  # int32 [N, T]
    state: np.ndarray  # int32 [N, T]
    action: np.ndarray  # int32 [N, T]
    mask: np.ndarray  # bool [N, T]


def human_term(log_pi: np.ndarray | float) -> np.ndarray:
    """Scaled human-likeness term ``h`` in [-1, 0] (see the module docstring)."""
    return np.maximum(np.asarray(log_pi, dtype=np.float64), LOG_FLOOR) / abs(LOG_FLOOR)


@dataclass(frozen=True)
class LevelFamily:
    """A fixed family of levels with their tabulated observations and human kernels."""

    n_levels: int
    n_states: int  # S = padded max states per level
    n_actions: int
    obs_dim: int
    state_mask: np.ndarray  # bool [L, S] (True = real, non-terminal state)
    observations: np.ndarray  # float32 [L, S, obs_dim]
    human_kernel: np.ndarray  # float32 [L, S, A], rows sum to 1; padded rows uniform
    size: int = 5
    name: str = "maze"
    seed: int = 0
    walls: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))  # [L, S]
    goal: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # [L]
    transitions: np.ndarray = field(
        default_factory=lambda: np.zeros((0, 0, 0), dtype=np.int32)
    )  # int32 [L, S, A] next state
    temperature: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    action_bias: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    def demonstrations(self, n_episodes: int, max_steps: int, seed: int) -> Demos:
        """Roll out the human profile: ``n_episodes`` episodes of at most ``max_steps``.

        Deterministic in ``seed``. Each episode picks a level and a start state
        uniformly; it ends at the goal (mask False afterwards) or after ``max_steps``.
        """
        if n_episodes < 1 or max_steps < 1:
            raise ValueError("n_episodes and max_steps must be >= 1")
        rng = np.random.default_rng(seed)
        level = np.zeros((n_episodes, max_steps), dtype=np.int32)
        state = np.zeros((n_episodes, max_steps), dtype=np.int32)
        action = np.zeros((n_episodes, max_steps), dtype=np.int32)
        mask = np.zeros((n_episodes, max_steps), dtype=bool)
        cdf = np.cumsum(self.human_kernel.astype(np.float64), axis=-1)
        for ep in range(n_episodes):
            lvl = int(rng.integers(self.n_levels))
            s = int(rng.choice(np.flatnonzero(self.state_mask[lvl])))
            level[ep, :] = lvl
            for t in range(max_steps):
                a = int(np.searchsorted(cdf[lvl, s], rng.random() * cdf[lvl, s, -1], side="right"))
                a = min(a, self.n_actions - 1)
                state[ep, t], action[ep, t], mask[ep, t] = s, a, True
                s = int(self.transitions[lvl, s, a])
                if s == int(self.goal[lvl]):
                    break
        return Demos(level=level, state=state, action=action, mask=mask)


def _neighbours(cell: int, size: int) -> list[int]:
    r, c = divmod(cell, size)
    out = []
    for dr, dc in _MOVES:
        nr, nc = r + dr, c + dc
        if 0 <= nr < size and 0 <= nc < size:
            out.append(int(nr * size + nc))
    return out


def _bfs_distance(walls: np.ndarray, goal: int, size: int) -> np.ndarray:
    """Shortest number of moves from every cell to ``goal`` (inf for walls/unreachable)."""
    dist = np.full(size * size, np.inf)
    dist[goal] = 0.0
    queue: deque[int] = deque([goal])
    while queue:
        cell = queue.popleft()
        for nb in _neighbours(cell, size):
            if not walls[nb] and dist[nb] == np.inf:
                dist[nb] = dist[cell] + 1
                queue.append(nb)
    return dist


def _make_level(
    name: str, size: int, rng: np.random.Generator
) -> tuple[np.ndarray, int, np.ndarray]:
    """Return (walls bool[S], goal cell, next-state table int[S, A]) for one level."""
    n_cells = size * size
    while True:
        density = 0.3 if name == "maze" else 0.0
        walls = rng.random(n_cells) < density
        goal = int(rng.integers(n_cells))
        walls[goal] = False
        dist = _bfs_distance(walls, goal, size)
        walls |= ~np.isfinite(dist)  # unreachable cells become walls
        # need at least a few decision states for the level to be interesting
        if int((~walls).sum()) - 1 >= max(3, n_cells // 3):
            break
    nxt = np.zeros((n_cells, N_ACTIONS), dtype=np.int32)
    for cell in range(n_cells):
        r, c = divmod(cell, size)
        for a, (dr, dc) in enumerate(_MOVES):
            nr, nc = r + dr, c + dc
            target = nr * size + nc
            inside = 0 <= nr < size and 0 <= nc < size
            nxt[cell, a] = target if inside and not walls[target] else cell
    return walls, goal, nxt


def _optimal_q(nxt: np.ndarray, goal: int, valid: np.ndarray, iters: int) -> np.ndarray:
    """Value iteration with unit step cost and gamma = 1; V(goal) = 0."""
    n_states = nxt.shape[0]
    v = np.zeros(n_states)
    for _ in range(iters):
        q = -1.0 + v[nxt]
        v_new = np.where(valid, q.max(axis=1), 0.0)
        v_new[goal] = 0.0
        if np.allclose(v_new, v):
            break
        v = v_new
    return -1.0 + v[nxt]


def make_family(name: str = "maze", n_levels: int = 8, size: int = 5, seed: int = 0) -> LevelFamily:
    """Build a deterministic level family. ``name``: "maze" (random walls) or "open"."""
    if name not in FAMILY_NAMES:
        raise ValueError(f"unknown level family {name!r}; choose one of {', '.join(FAMILY_NAMES)}")
    if n_levels < 1:
        raise ValueError(f"n_levels must be >= 1, got {n_levels}")
    if not 3 <= size <= 16:
        raise ValueError(f"size must be in [3, 16], got {size}")
    n_states = size * size
    obs_dim = 3 * n_states
    walls = np.zeros((n_levels, n_states), dtype=bool)
    goal = np.zeros(n_levels, dtype=np.int32)
    nxt = np.zeros((n_levels, n_states, N_ACTIONS), dtype=np.int32)
    state_mask = np.zeros((n_levels, n_states), dtype=bool)
    observations = np.zeros((n_levels, n_states, obs_dim), dtype=np.float32)
    kernel = np.full((n_levels, n_states, N_ACTIONS), 1.0 / N_ACTIONS, dtype=np.float32)
    temperature = np.zeros(n_levels, dtype=np.float32)
    bias = np.zeros((n_levels, N_ACTIONS), dtype=np.float32)
    for lvl in range(n_levels):
        rng = np.random.default_rng([seed, lvl])
        w, g, t = _make_level(name, size, rng)
        walls[lvl], goal[lvl], nxt[lvl] = w, g, t
        valid = ~w
        valid[g] = False
        state_mask[lvl] = valid
        temperature[lvl] = rng.uniform(0.35, 1.0)
        bias[lvl] = rng.normal(0.0, 0.4, size=N_ACTIONS)
        q = _optimal_q(t, g, valid, iters=4 * n_states)
        logits = (q + bias[lvl]) / temperature[lvl]
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        kernel[lvl, valid] = probs[valid].astype(np.float32)
        observations[lvl, :, n_states : 2 * n_states] = w.astype(np.float32)
        observations[lvl, :, 2 * n_states + g] = 1.0
        observations[lvl, np.arange(n_states), np.arange(n_states)] = 1.0
    # renormalise in float32 so every row sums to 1 to float32 precision
    kernel /= kernel.sum(axis=-1, keepdims=True)
    return LevelFamily(
        n_levels=n_levels,
        n_states=n_states,
        n_actions=N_ACTIONS,
        obs_dim=obs_dim,
        state_mask=state_mask,
        observations=observations,
        human_kernel=kernel,
        size=size,
        name=name,
        seed=seed,
        walls=walls,
        goal=goal,
        transitions=nxt,
        temperature=temperature,
        action_bias=bias,
    )


class BehaviourEnv(gym.Env[np.ndarray, np.int64]):
    """Maze env whose reward mixes task reward and human-likeness, weighted by ``alpha``.

    Each episode samples a level and a real start state uniformly (or uses ``level``
    if given). ``set_alpha`` changes the weight between rollouts (auto-alpha).
    """

    # gymnasium declares `metadata` as a plain class attribute; a ClassVar would clash.
    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012

    def __init__(
        self,
        family: LevelFamily,
        alpha: float = 0.0,
        max_steps: int | None = None,
        level: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        self.family = family
        self.set_alpha(alpha)
        self.max_steps = int(max_steps) if max_steps is not None else 4 * family.n_states
        if level is not None and not 0 <= level < family.n_levels:
            raise ValueError(f"level must be in [0, {family.n_levels}), got {level}")
        self.fixed_level = level
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, shape=(family.obs_dim,), dtype=np.float32)
        self.action_space = spaces.Discrete(family.n_actions)
        self._log_kernel = np.log(np.maximum(family.human_kernel.astype(np.float64), 1e-300))
        self.level = 0
        self.state = 0
        self.steps = 0

    def set_alpha(self, alpha: float) -> None:
        alpha = float(alpha)
        if not 0.0 <= alpha <= 1.0 or np.isnan(alpha):
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = alpha

    def _obs(self) -> np.ndarray:
        return self.family.observations[self.level, self.state].copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        fam = self.family
        self.level = (
            self.fixed_level
            if self.fixed_level is not None
            else int(self.np_random.integers(fam.n_levels))
        )
        self.state = int(self.np_random.choice(np.flatnonzero(fam.state_mask[self.level])))
        self.steps = 0
        return self._obs(), {"level": self.level, "state": self.state}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if not 0 <= a < self.family.n_actions:
            raise ValueError(f"invalid action {action!r}")
        fam = self.family
        s = self.state
        log_pi = float(self._log_kernel[self.level, s, a])
        self.state = int(fam.transitions[self.level, s, a])
        self.steps += 1
        terminated = self.state == int(fam.goal[self.level])
        r_task = GOAL_REWARD if terminated else -STEP_COST
        reward = (1.0 - self.alpha) * r_task + self.alpha * float(human_term(log_pi))
        truncated = not terminated and self.steps >= self.max_steps
        info = {"r_task": r_task, "log_pi_human": log_pi, "level": self.level, "state": s}
        return self._obs(), float(reward), terminated, truncated, info

    def render(self) -> str | None:  # type: ignore[override]
        size = self.family.size
        chars = []
        for cell in range(size * size):
            if cell == self.state:
                chars.append("A")
            elif cell == int(self.family.goal[self.level]):
                chars.append("G")
            elif self.family.walls[self.level, cell]:
                chars.append("#")
            else:
                chars.append(".")
        return "\n".join("".join(chars[r * size : (r + 1) * size]) for r in range(size))


_FAMILY_CACHE: dict[tuple[str, int, int, int], LevelFamily] = {}


def make_behaviour_env(
    alpha: float = 0.0,
    family_name: str = "maze",
    n_levels: int = 8,
    size: int = 5,
    family_seed: int = 0,
    max_steps: int | None = None,
    level: int | None = None,
    render_mode: str | None = None,
) -> BehaviourEnv:
    """Entry point of ``phantom/BehaviourMaze-v0``; families are cached per process."""
    key = (family_name, n_levels, size, family_seed)
    if key not in _FAMILY_CACHE:
        _FAMILY_CACHE[key] = make_family(family_name, n_levels, size, family_seed)
    return BehaviourEnv(
        _FAMILY_CACHE[key], alpha=alpha, max_steps=max_steps, level=level, render_mode=render_mode
    )


def _register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="engine.envs:make_behaviour_env")


_register()
