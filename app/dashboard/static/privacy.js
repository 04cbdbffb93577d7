// The privacy page: each dataset's budget, spend and ledger (from its JSON privacy report), each
// model's (epsilon, delta), and the printable report pages that carry the plots. Those pages
// need the API key too, which a plain link cannot send: a report is fetched with the key and
// shown here, at #report=/v1/.../privacy-report (so it can be reloaded, linked and printed).
// A model's monitoring page (/v1/models/{id}/monitoring) opens the same way, for the roles that
// may read it (privacy officers and data scientists: the roles that may read datasets too).

import {
  apiFetch,
  dateText,
  deltaText,
  epsilonText,
  getJSON,
  h,
  initApiKey,
  nextRelease,
  remainingText,
  reportHref,
  request,
  setStatus,
} from "./common.js";

const REPORT_HASH = new RegExp("^#report=(\\/(?:[\\w.~-]+\\/)*v1\\/"
  + "(?:(?:datasets|jobs)\\/\\d+\\/privacy-report|models\\/\\d+\\/monitoring))$");
const INERT = "script, style, link, meta, base, iframe, object, embed, form, template";
const STYLE_ELEMENT = /<style\b[^>]*>[\s\S]*?<\/style>/gi;

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
  const href = reportHref(`v1/datasets/${report.dataset_id}/privacy-report`);
  return h(
    "tr",
    { "data-dataset": report.dataset_id, "data-erased": report.erasure ? "true" : null },
    h("th", { scope: "row" }, `${report.dataset_name} (#${report.dataset_id})`,
      report.erasure ? h("span", { className: "erased", text: report.erasure }) : null),
    h("td", { className: "num", text: budget.limited ? String(budget.epsilon) : "no limit" }),
    h("td", { className: "num", text: deltaText(budget.delta) }),
    h("td", { className: "num", text: spentText }),
    nextReleaseCell(report),
    h("td", {}, used),
    h("td", {}, h("a", { href }, `Report of dataset ${report.dataset_id}`)),
  );
}

function nextReleaseCell(report) {
  const next = nextRelease(report);
  const text = remainingText(next.epsilon);
  return h("td", {
    className: "num",
    text: next.bound ? `at most ${text}` : text,
    title: next.bound ? "The per-patient budget may allow less: what this dataset's patients "
      + "have spent on other tables is shown to data stewards and admins only." : null,
  });
}

/** A release's RDP at the filter's order: the figure the filter adds up (rounded up). */
function filterCell(entry) {
  if (entry.non_private) return "\u221E";
  return entry.filter_rdp === null || entry.filter_rdp === undefined ? "\u2014"
    : epsilonText(entry.filter_rdp);
}

/** One headline epsilon per release (its PLD figure), the filter's working figure where the
 * dataset has a filter, and the spend after each charged release, with why they differ. */
function ledgerDetails(report) {
  const composedAfter = new Map(report.timeline.map((t) => [t.entry_id, t.composed_epsilon_text]));
  const filtered = report.spent.filter_rdp_bound !== null
    && report.spent.filter_rdp_bound !== undefined;
  const rows = report.entries.map((e) => h(
    "tr",
    {},
    h("td", { className: "num", text: e.id }),
    h("td", {}, e.job_id ? h("a", { href: reportHref(`v1/jobs/${e.job_id}/privacy-report`) },
      `Job ${e.job_id}`) : "\u2014"),
    h("td", { text: e.status }),
    h("td", { text: String(e.mechanism).replaceAll("_", " ") }),
    h("td", { className: "num", text: e.noise_multiplier === null ? "\u2014"
      : Number(e.noise_multiplier).toPrecision(4) }),
    h("td", { className: "num", text: e.sample_rate === null ? "\u2014"
      : Number(e.sample_rate).toPrecision(4) }),
    h("td", { className: "num", text: `${e.charged_steps ?? 0} of ${e.steps}` }),
    h("td", { className: "num", text: epsilonText(e.epsilon.pld, e.non_private) }),
    filtered ? h("td", { className: "num", text: filterCell(e) }) : null,
    h("td", { className: "num", text: composedAfter.get(e.id) ?? "\u2014" }),
  ));
  const headers = [["Entry", true], ["Job", false], ["Status", false], ["Mechanism", false],
    ["Noise \u03C3", true], ["Sample rate", true], ["Steps charged", true],
    ["\u03B5 (PLD)", true],
    ...(filtered ? [[`Filter's RDP at order ${report.terms.filter_order}`, true]] : []),
    ["Spent \u03B5 after (composed)", true]];
  const notes = [report.spent.figures_note, report.spent.composition_note].filter(Boolean);
  return h(
    "details",
    { "data-dataset": report.dataset_id },
    h("summary", {}, `Ledger of ${report.dataset_name} (#${report.dataset_id}): `
      + `${report.entries.length} ${report.entries.length === 1 ? "entry" : "entries"}`),
    report.erasure ? h("p", { className: "erased", text: report.erasure }) : null,
    h("div", { className: "table-wrap" }, table(`Ledger entries of dataset ${report.dataset_id}`,
      headers, rows)),
    ...notes.map((text) => h("p", { className: "note", text })),
  );
}

/** Whether the model's training rows are still held; erased, the model (a DP release of them)
 * stays in use under its guarantee. */
function trainingRows(model) {
  const erased = model.training_rows_erased_at;
  if (!erased) return h("td", { text: "not erased" });
  return h("td", { className: "erased", text: `erased on ${dateText(erased)}: the model, a DP `
    + "release of them, remains in use under its guarantee" });
}

/** What the model could not release meaningfully (app.jobs.size_floor), shown in its row. */
function modelWarning(model) {
  const messages = (model.metrics?.held_out_warnings || []).map((w) => w.message);
  return messages.length
    ? h("span", { className: "warning", text: `Warning: ${messages.join(" ")}` }) : null;
}

/** The model's monitoring page, where the key may read it (else no column at all). */
function monitoringCell(model) {
  return h("td", {}, h("a", { href: reportHref(`v1/models/${model.id}/monitoring`) },
    `Monitoring of model ${model.id}`));
}

function modelRow(model, monitoring) {
  const p = model.privacy || {};
  return h(
    "tr",
    { "data-model": model.id, "data-erased": model.training_rows_erased_at ? "true" : null },
    h("th", { scope: "row" }, `Model ${model.id}${model.active ? " (active: scores by "
      + "default)" : ""}`, modelWarning(model)),
    h("td", { text: model.version ?? "\u2014" }),
    h("td", { text: model.kind }),
    h("td", { className: "num", text: model.dataset_id }),
    h("td", { text: dateText(model.created_at) }),
    h("td", { className: "num", text: epsilonText(p.epsilon, p.non_private) }),
    h("td", { className: "num", text: deltaText(p.delta) }),
    trainingRows(model),
    h("td", {}, model.job_id ? h("a", { href: reportHref(`v1/jobs/${model.job_id}/privacy-report`) },
      `Report of job ${model.job_id}`) : "\u2014"),
    monitoring ? monitoringCell(model) : null,
  );
}

/** The role named in a 403 problem ("role 'clinician' may not call ..."), if it names one. */
function refusedRole(problem) {
  return /role '([\w-]+)'/.exec(problem?.detail || "")?.[1] || null;
}

/** Datasets are for privacy officers, data stewards and data scientists: a clinician's key is told so in
 * words, in place of the section (models and their reports stay: a clinician may read them). */
function datasetsRefused(problem) {
  const role = refusedRole(problem);
  const who = role ? `Your key's role (${role})` : "Your key's role";
  document.getElementById("datasets-section").replaceChildren(
    h("h2", { id: "datasets-heading", text: "Datasets and their budgets" }),
    h("p", { id: "datasets-refused", className: "notice", text: `${who} may not read datasets,`
      + " their privacy budgets or their ledgers: those are for privacy officers, data"
      + " stewards and data scientists. The models below, each with its (\u03B5, \u03B4) guarantee and its job's"
      + " privacy report (model card included), are what your key may read; ask a privacy"
      + " officer for a dataset's budget." }),
  );
}

/** Shows the datasets; false where the key's role may not read them (a clinician's), which
 * is also the one role of the model list that may not read monitoring pages. */
async function showDatasets() {
  const answer = await request("GET", "v1/datasets?limit=200");
  if (answer.status === 403) {
    datasetsRefused(answer.data);
    return false;
  }
  if (!answer.ok) {
    throw new Error(answer.data?.detail || `v1/datasets answered ${answer.status}`);
  }
  const reports = await Promise.all(
    answer.data.items.map((d) => getJSON(`v1/datasets/${d.id}/privacy-report`)),
  );
  const datasetHeaders = [["Dataset", false], ["Budget \u03B5", true], ["Budget \u03B4", true],
    ["Spent \u03B5 (composed)", true], ["Next release can use \u03B5", true], ["Used", false],
    ["Privacy report (with plot)", false]];
  document.getElementById("datasets").replaceChildren(table(
    "Privacy budget of each dataset (spend composed with R\u00E9nyi DP)", datasetHeaders,
    reports.map(datasetRow), { id: "datasets-table" }));
  document.getElementById("ledgers").replaceChildren(...reports.map(ledgerDetails));
  return true;
}

async function showOverview() {
  try {
    const [models, monitoring] = await Promise.all([getJSON("v1/models?limit=200"),
      showDatasets()]);
    const modelHeaders = [["Model", false], ["Version", false], ["Kind", false], ["Dataset", true],
      ["Trained", false], ["\u03B5 (PLD)", true], ["\u03B4", true], ["Training rows", false],
      ["Privacy report (\u03B5 per epoch)", false],
      ...(monitoring ? [["Monitoring", false]] : [])];
    document.getElementById("models").replaceChildren(table(
      "Trained models, newest first, with their (\u03B5, \u03B4) guarantee per patient",
      modelHeaders, (models.items || []).map((m) => modelRow(m, monitoring)),
      { id: "models-table" }));
    setStatus("");
    document.body.dataset.ready = "true";
  } catch (error) {
    setStatus(`The privacy data could not be loaded: ${error.message}`);
  }
}

/** The report page's content, inert: no script, style, handler or inline style survives, and
 * its links to other reports open here too. */
function reportNodes(html) {
  // The page's one style element goes before parsing: a parsed document takes this page's
  // Content-Security-Policy, which refuses inline style (this page's stylesheet styles it).
  const unstyled = html.replace(STYLE_ELEMENT, "");
  const page = new DOMParser().parseFromString(unstyled, "text/html");
  for (const node of page.body.querySelectorAll(INERT)) node.remove();
  for (const node of page.body.querySelectorAll("*")) {
    for (const attr of [...node.attributes]) {
      if (attr.name.startsWith("on") || attr.name === "style") node.removeAttribute(attr.name);
    }
  }
  for (const link of page.body.querySelectorAll("a[href]")) {
    const path = new URL(link.getAttribute("href"), window.location.href).pathname;
    if (REPORT_HASH.test(`#report=${path}`)) link.setAttribute("href", `#report=${path}`);
  }
  for (const table of page.body.querySelectorAll("table")) {
    if (table.parentElement?.classList.contains("table-wrap")) continue; // the page wraps it
    const wrap = h("div", { className: "table-wrap" });
    table.replaceWith(wrap);
    wrap.append(table);
  }
  const main = page.body.querySelector("main");
  if (main) main.replaceWith(...main.childNodes); // this page has its own <main>
  return [...page.body.childNodes].map((node) => document.adoptNode(node));
}

async function showReport(path) {
  const view = document.getElementById("report");
  setStatus("Loading the report\u2026");
  try {
    const response = await apiFetch("GET", path, { accept: "text/html" });
    if (!response.ok) {
      const problem = await response.json().catch(() => null);
      setStatus(`The report could not be loaded: ${problem?.detail || response.status}`);
      return;
    }
    const back = h("p", {}, h("a", { href: "privacy" }, "\u2190 All datasets and models"));
    view.replaceChildren(back, ...reportNodes(await response.text()));
    document.getElementById("overview").hidden = true;
    view.hidden = false;
    document.title = `${view.querySelector("h1")?.textContent || "Report"} \u2014 dpcrisis`;
    view.querySelector("h1")?.setAttribute("tabindex", "-1");
    view.querySelector("h1")?.focus();
    setStatus("");
    document.body.dataset.ready = "true";
  } catch (error) {
    setStatus(`The report could not be loaded: ${error.message}`);
  }
}

function route() {
  const match = REPORT_HASH.exec(window.location.hash);
  if (match) {
    showReport(match[1]);
  } else {
    document.getElementById("report").hidden = true;
    document.getElementById("overview").hidden = false;
    showOverview();
  }
}

if (initApiKey()) {
  window.addEventListener("hashchange", route);
  route();
}
