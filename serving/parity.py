"""The parity gate of `serving.export`: which rows an exported file is judged on, and what it must keep.

A single-label file is judged on what users see: its logits go through the blend and calibration the folder
serves (`ServedReference`), and against PyTorch fp32's served answers it must keep (issue 44)
- the label on --min-agreement of the answers fp32 is confident of (the model's served threshold where
  calibration.json sets one, else a served score of at least --confident-score);
- the label on --min-agreement of the answers that are not near-ties (fp32's top two served scores more than
  --near-tie-margin apart): a changed label among near-ties is noise a user cannot tell from the model's own;
- with labeled rows (--eval-csv): macro-F1 of the served labels within --max-f1-drop points, and the top-label
  ECE of the served scores at most --max-ece-rise points higher.
Plain argmax agreement of the model alone is still reported, no longer judged: a quantized model that moves
a few near-ties (0.975 agreement on a MiniLM fine-tune whose F1 moved +0.17 points) keeps every answer a user
relies on. A multi-label model is judged the same way per label decision, on its served scores and thresholds
(serving/parity_multilabel.py); agreement over all row x label decisions is reported, no longer judged. Without labels only agreement can be judged, on a built-in sample: the hand-written texts below
plus seeded recombinations of their sentences (real words, lengths from a few tokens to past any max_length),
so that one flipped near-tie is 0.2% and not 6%.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from serving.parity_stats import agreement_stats
from textdata.calibration import top_label_ece

# Short and long, Korean, English, mixed, noisy: the edge cases tokenisation and truncation must survive.
SAMPLE_TEXTS = [
    "오늘 회의 일정 메모", "어제 꿈에서 바다를 봤다", "로그인할 때 오류가 발생했다", "내일 약속 기록해 두기",
    "error 500 when saving", "dream about flying", "memo: buy milk", "ㅋㅋㅋㅋ 진짜 웃기네",
    "서버 에러 다시 발생함!!", "회의록 정리", "꿈 일기 쓰기 좋은 날씨", "a", "1234", "?!",
    "파일을 저장하면 프로그램이 멈추고 오류 메시지가 나타납니다. 다시 시작해도 같은 문제가 생깁니다.",
    "Calc에서 셀 서식을 바꾸려면 서식 메뉴를 선택합니다.", "https://example.com 링크 메모 😀",
    " ".join(["긴 문장을 반복해서 모델의 최대 길이를 넘기는 입력입니다"] * 60),
]

# Sentences the generated sample is built from: news, software help and notes, in English and Korean.
_SENTENCES = [
    "Shares in the company rose sharply after it reported record quarterly profits.",
    "The central bank kept interest rates unchanged despite rising inflation.",
    "The striker scored twice in the second half to secure the title.",
    "The coach said the team would need to improve its defence before the final.",
    "The minister announced a new bill to reform the tax system.",
    "Opposition leaders criticised the government over the delayed election.",
    "The new phone has a faster chip and a longer battery life.",
    "Engineers released a software update that fixes the security flaw.",
    "The film won three awards, including best actress, at the ceremony.",
    "The band will start a world tour next spring after releasing its album.",
    "Click the Save button or press Ctrl+S to keep your changes.",
    "If the program stops responding, close it and open the file again.",
    "To insert a chart, select the data and choose Insert, then Chart.",
    "The formula returns an error when the cell is empty.",
    "Remember to call the bank tomorrow morning.",
    "Meeting notes: budget review moved to Friday.",
    "주가가 실적 발표 이후 크게 올랐다.", "중앙은행이 기준금리를 동결했다.",
    "공격수가 후반전에 두 골을 넣어 우승을 확정했다.", "정부가 새로운 세제 개편안을 발표했다.",
    "새 휴대폰은 배터리가 오래가고 처리 속도가 빠르다.", "보안 문제를 고친 업데이트가 배포되었다.",
    "영화가 시상식에서 세 개의 상을 받았다.", "저장 버튼을 누르거나 Ctrl+S를 눌러 변경 내용을 저장합니다.",
    "셀이 비어 있으면 수식이 오류를 반환합니다.", "차트를 삽입하려면 데이터를 선택하고 삽입 메뉴를 누르세요.",
    "프레젠테이션에서 슬라이드 전환 효과를 바꿀 수 있습니다.", "수식 편집기에서 분수를 입력하는 방법",
    "내일 아침에 은행에 전화하기", "회의 메모: 예산 검토는 금요일로 변경",
]


def builtin_sample(n: int = 500, seed: int = 0) -> list[str]:
    """SAMPLE_TEXTS plus seeded texts of 1-12 sentences or fragments of 1-8 words, n texts in all."""
    rng = random.Random(seed)
    out = list(SAMPLE_TEXTS)
    while len(out) < n:
        words = " ".join(rng.choice(_SENTENCES) for _ in range(rng.choice((1, 2, 3, 5, 8, 12)))).split()
        if rng.random() < 0.3:  # a fragment of 1-8 words, as people type into a search box
            start = rng.randrange(len(words))
            words = words[start : start + rng.randint(1, 8)]
        out.append(" ".join(words))
    return out[:n]


def compare(ref: np.ndarray, got: np.ndarray, labels: list[str], y_true, thresholds: np.ndarray | None = None) -> dict:
    """Logit differences, argmax agreement with `ref`, and macro-F1 when labels are known (a single-label model:
    `thresholds` has nothing to say; `compare_label_sets` is the multi-label comparison, `comparison` picks)."""
    from sklearn.metrics import f1_score

    out = {
        "texts": len(ref),
        "max_abs_logit_diff": float(np.abs(ref - got).max()),
        "mean_abs_logit_diff": float(np.abs(ref - got).mean()),
        "argmax_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
    }
    if y_true is not None:
        pred = [labels[i] for i in got.argmax(1)]
        out["macro_f1"] = float(f1_score(y_true, pred, average="macro", zero_division=0))
    return out


def compare_label_sets(ref: np.ndarray, got: np.ndarray, labels: list[str], y_true: np.ndarray | None,
                       thresholds: np.ndarray) -> dict:
    """A multi-label model's `compare`: per-label decision agreement at `thresholds`, y_true an (n, L) 0/1 matrix."""
    from sklearn.metrics import f1_score

    from serving.multilabel import sigmoid

    p_ref, p_got = sigmoid(ref), sigmoid(got)
    d_ref, d_got = p_ref > thresholds[None, :], p_got > thresholds[None, :]
    out = {
        "texts": len(ref),
        "max_abs_logit_diff": float(np.abs(ref - got).max()),
        "mean_abs_logit_diff": float(np.abs(ref - got).mean()),
        "max_abs_prob_diff": float(np.abs(p_ref - p_got).max()),
        "label_agreement": float((d_ref == d_got).mean()),  # over every row x label decision
        "row_agreement": float((d_ref == d_got).all(1).mean()),  # rows whose whole label set is the same
    }
    if y_true is not None:
        out["macro_f1"] = float(f1_score(y_true, d_got.astype(np.int8), average="macro", zero_division=0))
        out["micro_f1"] = float(f1_score(y_true, d_got.astype(np.int8), average="micro", zero_division=0))
    return out


def agreement(stats: dict) -> tuple[str, float]:
    """(what was agreed on, the share): argmax for single-label, per-label decisions for multi-label."""
    key = "label_agreement" if "label_agreement" in stats else "argmax_agreement"
    return key.replace("_", " "), stats[key]


def verdict(stats: dict, reference_f1: float | None, min_agreement: float, max_f1_drop: float,
            max_ece_rise: float = 1.0) -> list[str]:
    """Why `stats` fails the gate; empty when it passes. max_f1_drop and max_ece_rise are in points (0.5 = half a
    point). With `stats["served"]` (single-label) what users see is judged; else agreement and the model's F1."""
    why = []
    if reference_f1 is not None and "macro_f1" in stats:  # the model alone: reported either way
        stats["macro_f1_change_points"] = 100 * (stats["macro_f1"] - reference_f1)
    if "served" in stats:
        return served_verdict(stats["served"], min_agreement, max_f1_drop, max_ece_rise)
    what, share = agreement(stats)
    if share < min_agreement:
        why.append(f"{what} {share:.4f} < {min_agreement}")
    if reference_f1 is not None and "macro_f1" in stats and -stats["macro_f1_change_points"] > max_f1_drop:
        why.append(f"macro-F1 {stats['macro_f1_change_points']:+.2f} points > -{max_f1_drop}")
    return why


@dataclass(frozen=True)
class ServedReference:
    """PyTorch fp32's answers on the judged rows as users get them, and how any file's logits become theirs."""

    to_served: Callable[[np.ndarray], np.ndarray]  # logits -> served scores (the folder's blend and calibration)
    probs: np.ndarray  # fp32's served scores
    confident: np.ndarray  # per row: fp32 calls its answer confident
    confident_rule: str
    labels: list[str]
    y: np.ndarray | None = None  # label index per row (-1: a label the model does not know); None: no labels
    thresholds: np.ndarray | None = None  # multi-label: the served thresholds (y then an (n, L) 0/1 matrix)

    @classmethod
    def of(cls, clf, texts: list[str], ref_logits: np.ndarray, y_true: list[str] | None,
           confident_score: float) -> ServedReference:
        """For a Classifier `clf` (the fp32 reference, loaded with the folder's blend): the texts encoded once (a
        blend's baseline reads them), the served transform is the engine's own. A multi-label `clf`: its decisions
        (serving/parity_multilabel.py), `y_true` the (n, L) 0/1 matrix."""
        seqs = clf.encode(texts)
        to_served = lambda logits: clf._proba(seqs, logits)
        of = clf.space.pick(cls._of_top_label, cls._of_label_set)
        return of(clf, to_served, to_served(ref_logits), y_true, confident_score)

    @classmethod
    def _of_label_set(cls, clf, to_served, probs: np.ndarray, y_true, confident_score: float) -> ServedReference:
        from serving.parity_multilabel import confident_decisions

        confident, rule = confident_decisions(clf, probs, confident_score)
        y = None if y_true is None else np.asarray(y_true)
        return ServedLabelSets(to_served, probs, confident, rule, list(clf.labels), y, np.asarray(clf.thresholds))

    def stats(self, got_logits: np.ndarray, near_tie_margin: float) -> dict:
        return _top_label_stats(self, got_logits, near_tie_margin)

    @classmethod
    def _of_top_label(cls, clf, to_served, probs: np.ndarray, y_true, confident_score: float) -> ServedReference:
        if clf.calibration.thresholds is not None:
            confident, rule = clf.calibration.confident(probs), "the model's served threshold (calibration.json)"
        else:
            confident, rule = probs.max(1) >= confident_score, f"served score >= {confident_score:g}"
        index = {name: i for i, name in enumerate(clf.labels)}
        y = None if y_true is None else np.array([index.get(v, -1) for v in y_true])
        return cls(to_served, probs, confident, rule, list(clf.labels), y)


@dataclass(frozen=True)
class ServedLabelSets(ServedReference):
    """A multi-label model's reference: `thresholds` its served thresholds, `y` an (n, L) 0/1 matrix; judged per
    label decision (serving/parity_multilabel.py)."""

    def stats(self, got_logits: np.ndarray, near_tie_margin: float) -> dict:
        from serving.parity_multilabel import served_stats_multi_label

        return served_stats_multi_label(self, got_logits, near_tie_margin)


def served_stats(ref: ServedReference, got_logits: np.ndarray, near_tie_margin: float) -> dict:
    """A file's served answers against fp32's (the reference's kind says how: `stats`)."""
    return ref.stats(got_logits, near_tie_margin)


def _top_label_stats(ref: ServedReference, got_logits: np.ndarray, near_tie_margin: float) -> dict:
    """A single-label file's served answers against fp32's: agreement overall, on fp32's confident answers and
    beyond near-ties, where the changed labels lie, and with labels the served macro-F1 and top-label ECE (and
    their change in points)."""
    from sklearn.metrics import f1_score

    got = ref.to_served(got_logits)
    want, said = ref.probs.argmax(1), got.argmax(1)
    same = want == said
    top2 = np.sort(ref.probs, 1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    out = agreement_stats(ref, got, same, margin, near_tie_margin)
    if ref.y is not None:
        truth = [ref.labels[i] if i >= 0 else "\0unknown" for i in ref.y]
        f1 = [f1_score(truth, [ref.labels[i] for i in p.argmax(1)], average="macro", zero_division=0)
              for p in (ref.probs, got)]
        ece = [top_label_ece(p, ref.y) for p in (ref.probs, got)]
        out.update(macro_f1=float(f1[1]), macro_f1_reference=float(f1[0]),
                   macro_f1_change_points=100 * float(f1[1] - f1[0]), ece=ece[1], ece_reference=ece[0],
                   ece_change_points=100 * (ece[1] - ece[0]))
    return out


def served_line(s: dict) -> str:
    """One line of what the gate judged on served answers (serving.export prints it per file)."""
    unit = " decisions" if s.get("unit") == "label decisions" else ""
    conf = "none confident" if s["confident_agreement"] is None else \
        f"{s['confident_agreement']:.4f} on {s['confident_rows']} confident{unit}"
    out = (f"agreement {s['agreement']:.4f}, {conf}, {s['changed_in_near_ties']} of {s['near_tie_rows']} near-ties "
           f"changed, {s['changed_beyond_near_ties']} beyond")
    if "macro_f1_change_points" in s:
        out += f", macro-F1 {s['macro_f1_change_points']:+.2f} points, ECE {s['ece_change_points']:+.2f} points"
    return out


def served_verdict(s: dict, min_agreement: float, max_f1_drop: float, max_ece_rise: float) -> list[str]:
    """Why served stats (`served_stats`) fail the gate; empty when they pass."""
    why = []
    if s["confident_agreement"] is not None and s["confident_agreement"] < min_agreement:
        why.append(f"agreement on the {s['confident_rows']} {s.get('unit', 'answers')} fp32 is confident of "
                   f"({s['confident_rule']}) "
                   f"{s['confident_agreement']:.4f} < {min_agreement}")
    if s["beyond_near_tie_agreement"] is not None and s["beyond_near_tie_agreement"] < min_agreement:
        near = "scores more than {:g} from the threshold" if s.get("unit") else "top two scores more than {:g} apart"
        why.append(f"agreement beyond near-ties (fp32's {near.format(s['near_tie_margin'])}) "
                   f"{s['beyond_near_tie_agreement']:.4f} < {min_agreement}: {s['changed_beyond_near_ties']} "
                   f"answers changed, the widest gap {s['largest_changed_margin']:.3f}")
    if "macro_f1_change_points" in s and -s["macro_f1_change_points"] > max_f1_drop:
        why.append(f"served macro-F1 {s['macro_f1_change_points']:+.2f} points > -{max_f1_drop}")
    if "ece_change_points" in s and s["ece_change_points"] > max_ece_rise:
        why.append(f"ECE {s['ece_change_points']:+.2f} points > +{max_ece_rise} ({s['ece_reference']:.4f} -> "
                   f"{s['ece']:.4f})")
    return why


def tokenization_mismatch(folder, clf, texts: list[str]) -> str | None:
    """The first text the engine tokenizes differently from transformers' own tokenizer (what training
    used), or None. Logit parity against the engine cannot see this: both sides share its ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    want = tok([clf.normalizer(t) for t in texts], truncation=True, max_length=clf.max_length)["input_ids"]
    for text, expected, got in zip(texts, want, clf.encode(texts)):
        if expected != got:
            return f"{text[:40]!r}: transformers {expected[:6]}…, the engine {got[:6]}…"
    return None
