// The contribution chart: one row per feature (its reason, its value as sent, a bar around a
// centre axis, the signed change in percentage points), largest first, as the API orders them.
//
// The axis is fixed (AXIS_POINTS either side of zero, the same for every patient and model), so
// two patients' bars can be compared by length; a contribution beyond it is drawn to the end of
// the axis and marked. Which way a feature moved the risk is the API's word (its `direction`:
// raises, lowers, or neutral for a contribution of floating-point size), so the page, FHIR and
// CDS Hooks never disagree; only an answer without one is judged here, by the same NEUTRAL.

import { h, percent, points } from "./common.js";
import { valueText } from "./schema.js";

export const AXIS_POINTS = 50;
export const NEUTRAL = 1e-9;
const AXIS = AXIS_POINTS / 100; // on the probability scale
const DIRECTIONS = new Set(["raises", "lowers", "neutral"]);

/** "raises", "lowers" or "neutral": the API's `direction`, else from the contribution. */
export function directionOf(item) {
  if (DIRECTIONS.has(item.direction)) return item.direction;
  const value = item.contribution_probability;
  if (!(Math.abs(value) >= NEUTRAL)) return "neutral";
  return value > 0 ? "raises" : "lowers";
}

/** The change in points as shown: "+12.3", "\u22120.04", "+<0.01"; "0.00" when neutral. */
export function changeText(item) {
  const direction = directionOf(item);
  if (direction === "neutral") return "0.00";
  const text = points(item.contribution_probability);
  if (text !== "0.00") return text;
  return `${direction === "raises" ? "+" : "\u2212"}<0.01`;
}

/** The first raising contribution (else the largest), for a one-line summary. */
export function topReason(answer) {
  const items = answer.contributions || [];
  const item = items.find((c) => directionOf(c) === "raises") || items[0];
  if (!item) return "\u2014";
  const word = { raises: "raises", lowers: "lowers", neutral: "no effect" }[directionOf(item)];
  return `${item.reason} (${word}, ${changeText(item)} points)`;
}

function axisRow() {
  const ticks = [-AXIS_POINTS, -AXIS_POINTS / 2, 0, AXIS_POINTS / 2, AXIS_POINTS];
  return h(
    "div",
    { className: "axis-row", "aria-hidden": "true" },
    h("span"),
    h("span", { className: "axis-ticks" }, ticks.map((t) =>
      h("span", { text: t > 0 ? `+${t}` : t < 0 ? `\u2212${-t}` : "0" }))),
    h("span", { className: "axis-unit", text: "points" }),
  );
}

function barRow(item, feature) {
  const direction = directionOf(item);
  const size = Math.abs(item.contribution_probability);
  const clipped = direction !== "neutral" && size > AXIS;
  const bar = h("span", { className: clipped ? "bar clipped" : "bar" });
  bar.style.width = `${direction === "neutral" ? 0 : Math.min(size / AXIS, 1) * 100}%`;
  const track = h(
    "span",
    { className: "bar-track", "aria-hidden": "true" },
    h("span", { className: "bar-half neg" }, direction === "lowers" ? bar : null),
    h("span", { className: "bar-half pos" }, direction === "raises" ? bar : null),
  );
  const arrow = { raises: "\u25B6 ", lowers: "\u25C0 ", neutral: "" }[direction];
  const word = { raises: "raises", lowers: "lowers", neutral: "no effect" }[direction];
  const label = item.label || feature?.label || item.feature;
  const shown = `${label}: ${valueText(feature, item.value)}`; // the value as it was sent
  return h(
    "li",
    { className: `bar-row ${direction}`, "data-feature": item.feature,
      "data-direction": direction },
    h(
      "span",
      { className: "bar-text" },
      h("span", { className: "bar-reason", text: item.reason }),
      shown === item.reason ? null : h("span", { className: "bar-feature", text: shown }),
    ),
    track,
    h(
      "span",
      { className: "bar-value" },
      h("span", { className: "dir" }, h("span", { "aria-hidden": "true", text: arrow }), word),
      ` ${changeText(item)} points`,
      clipped ? h("span", { className: "beyond", text: ` (beyond the \u00B1${AXIS_POINTS} axis)` })
        : null,
    ),
  );
}

/** The chart of one scored patient; ``features`` describe the scoring model's schema. */
export function contributionChart(answer, features) {
  const byName = new Map(features.map((f) => [f.name, f]));
  const reference = percent(answer.reference.probability);
  return h(
    "figure",
    { className: "chart", "aria-labelledby": "chart-caption" },
    h(
      "figcaption",
      { id: "chart-caption" },
      "How much each feature moved the probability, in percentage points, compared with the "
        + `public reference patient (${reference}); exact Shapley values, largest first, adding `
        + `up to ${percent(answer.probability)} \u2212 ${reference}. Solid bars to the right `
        + "raise the risk; hatched bars to the left lower it. The axis spans "
        + `\u2212${AXIS_POINTS} to +${AXIS_POINTS} points for every patient, so bars can be `
        + "compared between patients.",
    ),
    axisRow(),
    h("ol", { className: "bars", role: "list" },
      answer.contributions.map((item) => barRow(item, byName.get(item.feature)))),
  );
}
