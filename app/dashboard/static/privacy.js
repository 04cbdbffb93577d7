// The privacy page: each dataset's budget, spend and ledger (from its JSON privacy report), each
// model's (epsilon, delta), and links to the printable report pages that carry the plots.

import {
  apiPath,
  dateText,
  deltaText,
  epsilonText,
  getJSON,
  h,
  remainingText,
  setStatus,
} from "./common.js";

function meter(fraction) {
  const fill = h("span");
  fill.style.width = `${Math.min(Math.max(fraction, 0), 1) * 100}%`;
  return h("span", { className: "meter", "aria-hidden": "true" }, fill);
}

function table(caption, headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("caption", { text: caption }),
    h("thead", {}, h("tr", {}, headers.map(([text, numeric]) =>
      h("th", { scope: "col", className: numeric ? "num" : null, text })))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length,
      text: "None yet." }))),
  );
}

function datasetRow(report) {
  const budget = report.budget;
  const spent = report.spent;
  const spentText = epsilonText(spent.epsilon, spent.non_private);
  let used = "\u2014";
  if (budget.limited && spent.epsilon !== null) {
    const fraction = spent.epsilon / budget.epsilon;
    used = h("span", {}, `${Math.ceil(fraction * 100)} % spent`, meter(fraction));
  }
  const href = apiPath(`v1/datasets/${report.dataset_id}/privacy-report`);
  return h(
    "tr",
    { "data-dataset": report.dataset_id },
    h("th", { scope: "row", text: `${report.dataset_name} (#${report.dataset_id})` }),
    h("td", { className: "num", text: budget.limited ? String(budget.epsilon) : "no limit" }),
    h("td", { className: "num", text: deltaText(budget.delta) }),
    h("td", { className: "num", text: spentText }),
    h("td", { className: "num", text: remainingText(report.remaining.epsilon) }),
    h("td", {}, used),
    h("td", {}, h("a", { href }, `Report of dataset ${report.dataset_id}`)),
  );
}

function ledgerDetails(report) {
  const composedAfter = new Map(report.timeline.map((t) => [t.entry_id, t.composed_epsilon_text]));
  const rows = report.entries.map((e) => h(
    "tr",
    {},
    h("td", { className: "num", text: e.id }),
    h("td", {}, e.job_id ? h("a", { href: apiPath(`v1/jobs/${e.job_id}/privacy-report`) },
      `Job ${e.job_id}`) : "\u2014"),
    h("td", { text: e.status }),
    h("td", { text: String(e.mechanism).replaceAll("_", " ") }),
    h("td", { className: "num", text: e.noise_multiplier === null ? "\u2014"
      : Number(e.noise_multiplier).toPrecision(4) }),
    h("td", { className: "num", text: e.sample_rate === null ? "\u2014"
      : Number(e.sample_rate).toPrecision(4) }),
    h("td", { className: "num", text: `${e.charged_steps ?? 0} of ${e.steps}` }),
    h("td", { className: "num", text: e.epsilon_text }),
    h("td", { className: "num", text: composedAfter.get(e.id) ?? "\u2014" }),
  ));
  const headers = [["Entry", true], ["Job", false], ["Status", false], ["Mechanism", false],
    ["Noise \u03C3", true], ["Sample rate", true], ["Steps charged", true],
    ["Entry \u03B5 (RDP)", true], ["Composed \u03B5 after", true]];
  return h(
    "details",
    {},
    h("summary", {}, `Ledger of ${report.dataset_name} (#${report.dataset_id}): `
      + `${report.entries.length} ${report.entries.length === 1 ? "entry" : "entries"}`),
    h("div", { className: "table-wrap" }, table(`Ledger entries of dataset ${report.dataset_id}`,
      headers, rows)),
  );
}

function modelRow(model) {
  const p = model.privacy || {};
  return h(
    "tr",
    { "data-model": model.id },
    h("th", { scope: "row", text: `Model ${model.id}${model.active ? " (active: scores by "
      + "default)" : ""}` }),
    h("td", { text: model.version ?? "\u2014" }),
    h("td", { text: model.kind }),
    h("td", { className: "num", text: model.dataset_id }),
    h("td", { text: dateText(model.created_at) }),
    h("td", { className: "num", text: epsilonText(p.epsilon, p.non_private) }),
    h("td", { className: "num", text: deltaText(p.delta) }),
    h("td", { className: "num", text: p.non_private ? "\u221E" : epsilonText(p.epsilon_rdp) }),
    h("td", {}, model.job_id ? h("a", { href: apiPath(`v1/jobs/${model.job_id}/privacy-report`) },
      `Report of job ${model.job_id}`) : "\u2014"),
  );
}

async function initPrivacy() {
  try {
    const [datasets, models] = await Promise.all([
      getJSON("v1/datasets?limit=200"), getJSON("v1/models?limit=200"),
    ]);
    const reports = await Promise.all(
      datasets.items.map((d) => getJSON(`v1/datasets/${d.id}/privacy-report`)),
    );
    const datasetHeaders = [["Dataset", false], ["Budget \u03B5", true], ["Budget \u03B4", true],
      ["Spent \u03B5 (composed)", true], ["Remaining \u03B5", true], ["Used", false],
      ["Privacy report (with plot)", false]];
    document.getElementById("datasets").replaceChildren(table(
      "Privacy budget of each dataset (spend composed with R\u00E9nyi DP)", datasetHeaders,
      reports.map(datasetRow), { id: "datasets-table" }));
    document.getElementById("ledgers").replaceChildren(...reports.map(ledgerDetails));
    const modelHeaders = [["Model", false], ["Version", false], ["Kind", false], ["Dataset", true],
      ["Trained", false], ["\u03B5 (PRV)", true], ["\u03B4", true], ["\u03B5 (RDP)", true],
      ["Privacy report (\u03B5 per epoch)", false]];
    document.getElementById("models").replaceChildren(table(
      "Trained models, newest first, with their (\u03B5, \u03B4) guarantee per patient",
      modelHeaders, (models.items || []).map(modelRow),
      { id: "models-table" }));
    setStatus("");
    document.body.dataset.ready = "true";
  } catch (error) {
    setStatus(`The privacy data could not be loaded: ${error.message}`);
  }
}

initPrivacy();
