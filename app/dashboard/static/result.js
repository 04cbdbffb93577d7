// One scored patient on the scoring page: band, probability of the scoring model's outcome,
// the contribution chart and the model's privacy statement.

import { contributionChart } from "./chart.js";
import {
  badge,
  dateText,
  deltaText,
  epsilonText,
  h,
  percent,
  reportHref,
} from "./common.js";
import { featuresOf, outcomeText } from "./schema.js";

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

function privacyStatement(model, info) {
  const trained = `${model.kind} model ${model.id}, trained ${dateText(model.trained_at)} on `
    + `dataset ${model.dataset_id}`;
  let text;
  if (model.non_private) {
    text = `The ${trained}, was trained without differential privacy (\u03B5 = \u221E): its `
      + "scores carry no privacy guarantee for the patients it was trained on.";
  } else {
    const rdp = model.epsilon_rdp === null || model.epsilon_rdp === undefined
      ? ""
      : ` (the RDP accountant gives \u03B5 = ${epsilonText(model.epsilon_rdp)})`;
    text = `The ${trained}, satisfies (\u03B5 = ${epsilonText(model.epsilon)}, \u03B4 = `
      + `${deltaText(model.delta)})-differential privacy per ${model.unit} by the `
      + `${String(model.accountant).toUpperCase()} accountant${rdp}. The guarantee covers the `
      + "model and everything computed from it alone, this score included.";
  }
  const link = info?.job_id
    ? h("a", { href: reportHref(`v1/jobs/${info.job_id}/privacy-report`) },
      `Privacy report of job ${info.job_id} (\u03B5 per epoch, model card)`)
    : null;
  return h("div", { className: "statement", id: "privacy-statement" },
    h("p", { text }), link ? h("p", {}, link) : null);
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
    h("h4", { text: "What contributed" }),
    contributionChart(answer, features),
    h("h4", { text: "Model and privacy" }),
    privacyStatement(answer.model, info),
    h("p", { className: "note", text: "Decision support, not a diagnosis: the model sees "
      + `${count} feature${count === 1 ? "" : "s"} only, and the risk depends on much it does `
      + "not see." }),
  );
  heading.focus();
}
