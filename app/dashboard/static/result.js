// One scored patient on the scoring page: band, probability of the scoring model's outcome,
// the contribution chart and the model's privacy statement.

import { contributionChart } from "./chart.js";
import {
  accountantName,
  badge,
  dateText,
  deltaText,
  epsilonText,
  h,
  percent,
  reportHref,
} from "./common.js";
import { featuresOf, outcomeText, valueText } from "./schema.js";

function thresholdText(probability, thresholds, band) {
  const lowMedium = percent(thresholds.low_medium);
  const mediumHigh = percent(thresholds.medium_high);
  const why = {
    low: `${percent(probability)} is below ${lowMedium}`,
    medium: `${percent(probability)} is at or above ${lowMedium} and below ${mediumHigh}`,
    high: `${percent(probability)} is at or above ${mediumHigh}`,
  }[band];
  return `Bands of this model: low below ${lowMedium}, medium from ${lowMedium} to below `
    + `${mediumHigh}, high from ${mediumHigh}. ${why}, so the band is ${band}.`;
}

/** How a probability compares with another: "far below", "below", "close to", ... */
function comparedWith(p, base) {
  const ratio = p / base;
  if (ratio < 0.2) return "far below";
  if (ratio < 0.67) return "below";
  if (ratio <= 1.5) return "close to";
  return ratio < 5 ? "above" : "far above";
}

function timesText(p, base) {
  const ratio = p / base;
  if (ratio >= 1.5) return `about ${ratio < 10 ? ratio.toFixed(1) : Math.round(ratio)} times`;
  return ratio > 0.67 ? "about the same as" : `${comparedWith(p, base)}`;
}

/** Which inputs were not given and so scored at the reference value; null when none. */
function imputedNote(answer, features) {
  const names = answer.imputed || [];
  if (!names.length) return null;
  const byName = new Map(features.map((f) => [f.name, f]));
  const values = answer.reference?.features || {};
  const listed = names.map((name) => {
    const feature = byName.get(name);
    return `${feature?.label || name} (${valueText(feature, values[name])})`;
  });
  return h("p", { id: "imputed", className: "note", text: "Not given, so scored at the "
    + `reference patient's value, as the model's schema allows: ${listed.join("; ")}.` });
}

function referenceText(answer, features) {
  const values = answer.reference?.features || {};
  return features.filter((f) => f.name in values)
    .map((f) => `${f.label}: ${valueText(f, values[f.name])}`).join("; ");
}

function baseRateText(info, outcome) {
  const metrics = info?.metrics || {};
  const rate = metrics.prevalence;
  if (!(typeof rate === "number" && rate > 0)) return null;
  const ci = Array.isArray(metrics.prevalence_ci) && metrics.prevalence_ci.every(Number.isFinite)
    ? `, 95 % interval ${percent(metrics.prevalence_ci[0])} to ${percent(metrics.prevalence_ci[1])}`
    : "";
  return { rate, text: `About ${percent(rate)} of the held-out patients had ${outcome} (the base `
    + `rate: a differentially private estimate from the model's evaluation${ci}).` };
}

/**
 * The baseline in words: what the bars are measured from (the public reference patient), how
 * that patient's risk compares with the base rate, and so what "raises" means.
 */
function baseline(answer, info, features) {
  const outcome = outcomeText(info?.schema);
  const reference = answer.reference.probability;
  const who = referenceText(answer, features);
  const parts = [`The bars start from the reference patient of this model${who ? ` (${who})` : ""}`
    + `, whose predicted probability is ${percent(reference)}. The reference patient is a `
    + "fixed, public set of values declared with the model, not an average patient."];
  const base = baseRateText(info, outcome);
  if (base) {
    parts.push(base.text);
    const where = comparedWith(reference, base.rate);
    parts.push(`The reference patient's risk is ${where} that base rate`
      + (where.endsWith("below") ? ", so most features of most patients raise the risk: "
        + "\u201Craises\u201D means higher than for the reference patient, not higher than "
        + "usual." : "."));
    parts.push(`This patient's ${percent(answer.probability)} is `
      + `${timesText(answer.probability, base.rate)} the base rate.`);
  } else {
    parts.push("No base rate is available for this model (too few held-out rows for a DP "
      + "estimate): \u201Craises\u201D means higher than for the reference patient, not "
      + "higher than usual.");
  }
  return h("p", { id: "baseline", className: "baseline", text: parts.join(" ") });
}

function privacyStatement(model, info) {
  const trained = `${model.kind} model ${model.id}, trained ${dateText(model.trained_at)} on `
    + `dataset ${model.dataset_id}`;
  let text;
  if (model.non_private) {
    text = `The ${trained}, was trained without differential privacy (\u03B5 = \u221E): its `
      + "scores carry no privacy guarantee for the patients it was trained on.";
  } else {
    text = `The ${trained}, satisfies (\u03B5 = ${epsilonText(model.epsilon)}, \u03B4 = `
      + `${deltaText(model.delta)})-differential privacy per ${model.unit} by the `
      + `${accountantName(model.accountant)} accountant. The guarantee covers the `
      + "model and everything computed from it alone, this score included.";
  }
  const link = info?.job_id
    ? h("a", { href: reportHref(`v1/jobs/${info.job_id}/privacy-report`) },
      `Privacy report of job ${info.job_id} (\u03B5 per epoch, model card)`)
    : null;
  return h("div", { className: "statement", id: "privacy-statement" },
    h("p", { text }), heldOutWarning(model, info), link ? h("p", {}, link) : null);
}

/**
 * What the model could not release meaningfully (a held-out part below its size floor, or no
 * calibration at all), as a visible warning beside its guarantee; null when it could.
 */
function heldOutWarning(model, info) {
  const messages = (info?.metrics?.held_out_warnings || []).map((w) => w.message);
  if (!messages.length && model.calibrated !== false) return null;
  const text = messages.length ? messages.join(" ")
    : "Its probabilities were not calibrated on held-out data.";
  return h("p", { className: "warning", id: "held-out-warning", text: `Warning: ${text}` });
}

/**
 * Show one answer of POST /v1/risk in ``result``; ``info`` is the scoring model as
 * GET /v1/models describes it (its schema names the outcome and describes the features).
 */
export function renderResult(result, answer, info) {
  const features = featuresOf(info?.schema);
  const count = answer.contributions.length;
  const heading = h("h3", { id: "result-heading", tabindex: "-1", text: "Result" });
  result.replaceChildren(
    heading,
    h(
      "div",
      { className: "summary-line" },
      badge(answer.band),
      h(
        "p",
        { className: "probability", id: "probability" },
        h("strong", { text: percent(answer.probability) }),
        ` predicted probability of ${outcomeText(info?.schema)}`,
      ),
    ),
    h("p", { id: "thresholds", text: thresholdText(answer.probability, answer.band_thresholds,
      answer.band) }),
    h("h4", { text: "Compared with what" }),
    baseline(answer, info, features),
    h("h4", { text: "What contributed" }),
    imputedNote(answer, features),
    contributionChart(answer, features),
    h("h4", { text: "Model and privacy" }),
    privacyStatement(answer.model, info),
    h("p", { className: "note", text: "Decision support, not a diagnosis: the model sees "
      + `${count} feature${count === 1 ? "" : "s"} only, and the risk depends on much it does `
      + "not see." }),
  );
  heading.focus();
}
