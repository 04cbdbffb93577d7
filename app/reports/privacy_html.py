"""Privacy reports as self-contained HTML pages, rendered from the JSON reports' models.

A privacy officer opens these in a browser and prints or forwards them, so the pages carry no
script and fetch nothing: the plots are inline SVG (``app.reports.svg_plot``), the style is one
inline block whose hash is the only style the Content-Security-Policy allows, and every datum
in a plot is repeated in a table. The markup is in the templates ``job.html`` and
``dataset.html`` (``app/reports/templates/``); this module prepares plain values for them, which
the templates escape (see ``app.reports.html``).
"""

import math
from typing import Any

from app.privacy.figures import epsilon_text, round_down, round_up
from app.reports import ledger_words, patient_html
from app.reports.html import (
    INFINITY_LABEL,
    MISSING,
    Link,
    chart_svg,
    eps,
    finite,
    num,
    render,
    table,
    when,
)
from app.reports.metrics_html import metrics_section
from app.reports.release_schemas import ReleaseRef
from app.reports.schemas import DatasetPrivacyReport, JobPrivacyReport, ModelCard
from app.reports.svg_plot import PALETTE, Chart, Reference, Series


def report_href(kind: str, ident: int, root_path: str = "") -> str:
    """The report page of a job or dataset (``kind`` "jobs" or "datasets")."""
    return f"{root_path}/v1/{kind}/{ident}/privacy-report"


def _job_link(job_id: int, root_path: str) -> Link:
    return Link(report_href("jobs", job_id, root_path), f"job {job_id}")


def _release_link(release: ReleaseRef, root_path: str) -> Link:
    """What a ledger entry's spend paid for, in words, linking to it."""
    return Link(f"{root_path}{release.href}", release.words)


def epoch_chart(report: JobPrivacyReport) -> Chart:
    """The headline (PLD) epsilon after each epoch, with the planned final epsilon and the
    target (the RDP figures stay in the JSON: one epsilon per release is what a person reads)."""
    per_epoch = report.epsilon_per_epoch
    non_private = report.non_private
    pld = [(e.epoch, _infinite_if(e.pld, non_private)) for e in per_epoch]
    references = []
    planned = report.epsilon.pld
    if finite(planned):
        references.append(Reference(f"planned final ε (PLD) {epsilon_text(planned)}", planned))
    target = report.target_epsilon
    if finite(target):
        references.append(Reference(f"target ε {target:g}", target, color="#7a3e00", dash="2 3"))
    last_epoch = max([report.epochs, *(e.epoch for e in per_epoch)])
    return Chart(
        chart_id="epsilon-per-epoch",
        title=f"Epsilon per epoch, job {report.job_id}",
        description=(
            f"Epsilon after each of {len(per_epoch)} finished epochs of {report.epochs} "
            f"planned, by the PLD accountant at delta {report.delta:g}."
        ),
        x_label="epoch",
        y_label=f"ε at δ = {report.delta:g}",
        series=[
            Series("ε, PLD accountant (the headline guarantee)", pld, color=PALETTE[0]),
        ],
        references=references,
        x_domain=(0, max(last_epoch, 1)),
        x_integer=True,
        empty_message="No epoch has finished yet",
        off_scale_label="∞: non-private (off the scale)",
    )

def _infinite_if(value: float | None, non_private: bool) -> float | None:
    """Null epsilons of non-private spend become infinity, which the chart draws off scale."""
    return math.inf if value is None and non_private else value

def _epoch_table(report: JobPrivacyReport) -> dict[str, Any]:
    non_private = report.non_private
    rows = [
        [
            str(e.epoch),
            eps(e.pld, non_private=non_private),
        ]
        for e in report.epsilon_per_epoch
    ]
    return table(
        "Epsilon per epoch (data of the plot above)",
        [("Epoch", True), ("ε, PLD (the headline guarantee)", True)],
        rows,
    )


def _job_facts(report: JobPrivacyReport, root_path: str) -> list[tuple[str, str | Link]]:
    non_private = report.non_private
    pld = report.epsilon.pld
    return [
        ("Privacy unit", report.privacy_unit),
        ("Dataset", _dataset_link(report, root_path)),
        ("Rows", f"{report.dataset_rows} ({report.training_rows} training, "
                 f"{report.holdout_rows} held out)"),
        ("Mechanism", report.mechanism),
        ("Sampling", f"Poisson, rate q = {num(report.sample_rate)}"),
        ("Expected batch size", num(report.expected_batch_size, ".1f")),
        ("Noise multiplier σ", num(report.noise_multiplier)),
        ("Clip norm C", f"{num(report.clip_norm, 'g')}; {report.clipping}"),
        ("Steps", f"{report.steps} ({report.steps_per_epoch} per epoch, "
                  f"{report.epochs} epochs; {report.epochs_completed} completed)"),
        ("δ", num(report.delta, "g")),
        ("ε, PLD accountant (the headline guarantee)", eps(pld, non_private=non_private)),
        *_filter_fact(report.filter_rdp, report.terms.filter_order),
        ("Target ε", num(report.target_epsilon, "g")),
    ]


def _filter_fact(rdp: float | None, order: float | None) -> list[tuple[str, str]]:
    """The filter's working figure, where admission uses it (a dataset with a filter)."""
    if rdp is None or order is None:
        return []
    return [("The filter's working figure", f"RDP at order {order:g}: {rdp_text(rdp)} (what the "
             "dataset's filter adds up against its bound)")]


def _dataset_name(report: JobPrivacyReport | DatasetPrivacyReport) -> str:
    return f"{report.dataset_name or 'dataset'} (id {report.dataset_id})"


def _dataset_link(report: JobPrivacyReport, root_path: str) -> Link:
    return Link(report_href("datasets", report.dataset_id, root_path), _dataset_name(report))


def _model_card(card: ModelCard) -> dict[str, Any]:
    data = card.training_data
    metrics = card.metrics.values.model_dump(mode="json") if card.metrics.values else None
    return {
        "use": card.intended_use,
        "data_facts": [
            ("Dataset", f"{data.dataset_name} (id {data.dataset_id})"),
            ("Source", data.source),
            ("Public", "yes" if data.public else "no (protected by a privacy budget)"),
            ("Rows", str(data.rows)),
            ("Training rows", str(data.training_rows)),
            ("Held-out rows", str(data.holdout_rows)),
        ],
        "data_note": data.note,
        "metrics": metrics_section(metrics, outcome=card.outcome) if metrics else None,
        "metrics_note": card.metrics.note,
        "caveats": card.caveats,
        "erasure": card.erasure,
    }


def render_job_page(report: JobPrivacyReport, *, root_path: str = "") -> str:
    """The job's privacy report as a complete HTML5 document (template ``job.html``)."""
    return render(
        "job.html",
        title=f"Privacy report: job {report.job_id}",
        report=report,
        infinity=INFINITY_LABEL,
        delta=num(report.delta, "g"),
        dataset=_dataset_link(report, root_path),
        page_facts=_job_facts(report, root_path),
        plot=chart_svg(epoch_chart(report)),
        epoch_table=_epoch_table(report),
        card=_model_card(report.model_card),
        figures_note=(ledger_words.figures_note(report.terms.filter_order)
                      if report.filter_rdp is not None else ""),
    )


def spend_chart(report: DatasetPrivacyReport) -> Chart:
    """Composed (the filter's figure) and naive (the sum of the releases' tight figures)
    cumulative spend after each charged entry (a job or a statistics release), against the
    budget."""
    timeline = report.timeline
    composed: list[tuple[float, float | None]] = [(0.0, 0.0)] if timeline else []
    naive: list[tuple[float, float | None]] = [(0.0, 0.0)] if timeline else []
    for i, point in enumerate(timeline, start=1):
        # In the timeline null means infinite: a non-private job was charged.
        composed.append((i, _infinite_if(point.composed_epsilon, True)))
        naive.append((i, _infinite_if(point.naive_epsilon, True)))
    budget = report.budget.epsilon
    references = [Reference(f"budget ε {budget:g}", budget)] if finite(budget) else []
    return Chart(
        chart_id="cumulative-spend",
        title=f"Cumulative privacy spend, dataset {report.dataset_id}",
        description=(
            f"Spend after each of {len(timeline)} charged jobs and statistics releases: "
            f"composed by the filter ({report.spent.epsilon_text}) and the sum of each "
            f"release's tight ε ({report.spent.naive_sum_epsilon_text})"
            + (f", against a budget of {budget:g}." if finite(budget) else "; no budget.")
        ),
        x_label="charged jobs and statistics releases (ledger order)",
        y_label="cumulative ε",
        series=[
            # step-after: the spend rises at the entry that charged it, not one entry early.
            Series("spent, composed (the filter's figure)", composed, color=PALETTE[0],
                   shape="step-after"),
            Series(
                "sum of each release's tight ε (PLD)", naive, color=PALETTE[1], shape="step-after",
                dash="6 4", marker="square",
            ),
        ],
        references=references,
        x_domain=(0, max(len(timeline), 1) + 0.5),  # room to see the last rise
        x_integer=True,
        empty_message="No job has been charged yet, nor any statistics release",
        off_scale_label="∞: a non-private job was charged (off the scale)",
    )

def _timeline_table(report: DatasetPrivacyReport, root_path: str) -> dict[str, Any]:
    rows = [
        [
            str(i),
            str(p.entry_id),
            _release_link(p.release, root_path),
            when(p.at),
            eps(p.composed_epsilon, non_private=p.composed_epsilon is None),
            eps(p.naive_epsilon, non_private=p.naive_epsilon is None),
        ]
        for i, p in enumerate(report.timeline, start=1)
    ]
    headers = [("#", True), ("Ledger entry", True), ("Release", False),
               ("Charged at", False), ("Spent ε after (composed)", True),
               ("Sum of tight ε after", True)]
    return table("Cumulative spend (data of the plot above)", headers, rows)


def _entries_table(report: DatasetPrivacyReport, root_path: str) -> dict[str, Any]:
    """One headline ε per release (its PLD figure) and, with a filter, the filter's working
    figure beside it (the page says why they differ)."""
    order = report.terms.filter_order if report.spent.filter_rdp_bound is not None else None
    rows = [
        [
            str(e.id),
            _release_link(e.release, root_path),
            e.status or MISSING,
            e.mechanism,
            num(e.noise_multiplier),
            num(e.sample_rate),
            f"{num(e.charged_steps)} of {num(e.steps)}",
            num(e.clip_norm, "g"),
            num(e.delta, "g"),
            eps(e.epsilon.pld, non_private=e.non_private),
            *([] if order is None else [_filter_cell(e.filter_rdp, e.non_private)]),
        ]
        for e in report.entries
    ]
    headers = [("Entry", True), ("Release", False), ("Status", False),
               ("Mechanism", False),
               ("σ", True), ("q", True), ("Steps charged", True), ("C", True), ("δ", True),
               ("ε (PLD)", True),
               *([] if order is None else [(f"Filter's RDP at order {order:g}", True)])]
    return table("Ledger entries (only charged steps count against the budget)", headers, rows)


def _filter_cell(rdp: float | None, non_private: bool) -> str:
    if non_private:
        return INFINITY_LABEL
    return MISSING if rdp is None else rdp_text(rdp)


def rdp_text(value: float) -> str:
    """An RDP charge, rounded up to 4 digits like every spend (never understated)."""
    return f"{round_up(value, 4):.4g}"


def _dataset_facts(report: DatasetPrivacyReport) -> list[tuple[str, str]]:
    budget, spent, left = report.budget, report.spent, report.remaining.epsilon
    if budget.limited:
        budget_text = f"ε = {num(budget.epsilon, 'g')}, δ = {num(budget.delta, 'g')}"
        remaining = num(round_down(left, 4) if left is not None else None, "g")
    else:
        budget_text = "none (public dataset)"
        remaining = "unlimited (no budget)"
    filtered = spent.filter_rdp_bound is not None
    return [
        ("Privacy unit", report.privacy_unit),
        ("Public", "yes" if report.public else "no"),
        ("Budget", budget_text),
        ("Spent ε, composed" + (" (the filter's figure)" if filtered else " (RDP, information)"),
         eps(spent.epsilon, non_private=spent.non_private)),
        ("Sum of each release's tight ε (PLD)",
         eps(spent.naive_sum_epsilon, non_private=spent.non_private)),
        *([("Composition against the sum", spent.composition_note)]
          if spent.composition_note else []),
        *_filter_facts(report),
        ("Remaining ε", remaining),
        ("Composition", spent.composition),
    ]


def _filter_facts(report: DatasetPrivacyReport) -> list[tuple[str, str]]:
    """What the filter compares with its bound: the releases' RDP at its order, summed."""
    spent, order = report.spent, report.terms.filter_order
    if spent.filter_rdp_bound is None or order is None:
        return []
    total = INFINITY_LABEL if spent.filter_rdp is None else rdp_text(spent.filter_rdp)
    return [("The filter's working figure", f"RDP at order {order:g}: {total} of its bound "
             f"{num(spent.filter_rdp_bound)}")]


def _statistics_table(report: DatasetPrivacyReport, root_path: str) -> dict[str, Any] | None:
    """The dataset's statistics releases, beside the jobs (their charges are in the ledger)."""
    releases = report.statistics_releases
    if not releases:
        return None
    rows = [
        [
            Link(f"{root_path}{r.href}", f"statistics {r.id}"),
            when(r.created_at),
            r.mechanism,
            num(r.delta, "g") if r.delta is not None else "0 (pure ε)",
            eps(r.epsilon),
            "; ".join(r.queries),
            str(r.cells),
            MISSING if r.ledger_entry_id is None else str(r.ledger_entry_id),
        ]
        for r in releases
    ]
    headers = [("Release", False), ("Released at", False), ("Mechanism", False),
               ("δ", True), ("ε (its headline)", True), ("Queries", False),
               ("Cells", True), ("Ledger entry", True)]
    return table("Statistics releases (every record; charged in the ledger above)", headers,
                 rows)


def _audits_table(report: DatasetPrivacyReport, root_path: str) -> dict[str, Any] | None:
    """The dataset's privacy audits; an alarm row is red and says so in words."""
    audits = report.privacy_audits
    if not audits:
        return None
    rows = [
        [
            Link(f"{root_path}{a.report}", f"audit {a.id}"),
            _job_link(a.audited_job_id, root_path),
            a.status,
            eps(a.accounted_epsilon, non_private=a.accounted_epsilon is None),
            num(round_down(a.audited_epsilon, 3) if finite(a.audited_epsilon) else None,
                ".3g"),
            "PRIVACY BUG" if a.alarm else "none",
        ]
        for a in audits
    ]
    headers = [("Audit", False), ("Audited job", False), ("Status", False),
               ("Accounted ε (upper bound)", True), ("Audited ε (lower bound)", True),
               ("Alarm", False)]
    return table("Empirical audits of the accounting (they charge nothing)", headers, rows,
                 alarms=[a.alarm for a in audits])


def render_dataset_page(report: DatasetPrivacyReport, *, root_path: str = "") -> str:
    """The dataset's ledger report as a complete HTML5 document (template ``dataset.html``)."""
    spent = report.spent
    budget = report.budget
    return render(
        "dataset.html",
        title=f"Privacy report: dataset {report.dataset_id}",
        report=report,
        name=_dataset_name(report),
        spent=eps(spent.epsilon, non_private=spent.non_private),
        budget=num(budget.epsilon, "g") if budget.limited else None,
        page_facts=_dataset_facts(report),
        plot=chart_svg(spend_chart(report)),
        timeline_table=_timeline_table(report, root_path),
        entries_table=_entries_table(report, root_path),
        statistics_table=_statistics_table(report, root_path),
        audits_table=_audits_table(report, root_path),
        patient_facts=patient_html.patient_facts(report.patient_budget),
        blocks_table=patient_html.blocks_table(report.patient_budget),
        block_timeline_table=patient_html.block_timeline_table(report.patient_budget),
    )
