"""The learning loop's API: versions (/v1/models), retraining (/v1/train) and its jobs (/v1/jobs).

Training, activating and deleting change what the server answers, so they are admin actions: with
--api-key they need the key (the gate checks it on every route); without one they are refused unless the
server listens on a loopback address only, or --allow-admin says anyone who can reach it may. Reading the
registry and the jobs (labeled texts, training logs) follows the same rule, and shows names, not server
paths (app/http/redact.py).
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import PlainTextResponse

from app.config import open_to_anyone
from app.http.redact import names_only, names_only_text
from app.versions.jobs import JobConflict, Jobs
from app.versions.registry import ChangedFiles, Registry, RegistryError
from app.versions.swap import ActivationBusy, ActivationError, Switcher
from app.versions.train_params import request_model
from app.versions.trainset import TrainingDataError
from textdata.errors import DataError


def admin_refusal(cfg) -> str | None:
    """Why admin actions are refused on this server, or None when they are allowed."""
    if not open_to_anyone(cfg):
        return None
    return (f"training, activating and deleting models are refused: this server has no --api-key and listens on "
            f"{cfg.host}, so anyone who can reach it could change what it answers. Start it with --api-key KEY "
            f"(or ELECTRA_API_KEY), listen on 127.0.0.1, or pass --allow-admin to allow them without a key")


TrainRequest = request_model()  # app/versions/train_params.py RETRAINABLE: the same bounds the Train tab is checked against


def add_admin_routes(app: FastAPI, cfg, state, registry: Registry, switcher: Switcher) -> Jobs:
    jobs = getattr(switcher, "jobs_class", Jobs)(cfg, registry, switcher)  # a fleet's: one trainer (app/fleet/jobs.py)

    def admin() -> None:
        why = admin_refusal(cfg)
        if why:
            raise HTTPException(403, why)

    @app.get("/v1/models")
    async def models():
        admin()  # reading the registry and jobs (labeled texts, logs) too: the same rule as changing them
        return names_only({"active": registry.active(), "serving": state.served.version, "activating": switcher.busy,
                           "promote": cfg.promote, "promote_tolerance": cfg.promote_tolerance,
                           "versions": registry.listing()})

    @app.post("/v1/models/{version}/activate")
    async def activate(version: str):
        admin()
        try:
            engine = await switcher.activate(version, why=f"POST /v1/models/{version}/activate")
        except ChangedFiles as e:  # it exists, and is refused: a conflict, not an unknown version
            raise HTTPException(409, names_only_text(str(e))) from None
        except RegistryError as e:
            raise HTTPException(404, names_only_text(str(e))) from None
        except ActivationBusy as e:  # another promotion is running: at once, no replica blamed (issue 63, L6)
            raise HTTPException(409, names_only_text(str(e))) from None
        except ActivationError as e:
            raise HTTPException(422, names_only_text(str(e))) from None
        return {"active": engine.version, "serving": state.served.version}

    @app.delete("/v1/models/{version}")
    async def delete(version: str):
        admin()
        try:
            registry.path(version)
            registry.delete(version)
        except RegistryError as e:
            raise HTTPException(409 if version == registry.active() else 404, names_only_text(str(e))) from None
        return {"deleted": version}

    @app.post("/v1/train", status_code=202)
    async def train(req: TrainRequest | None = None):
        admin()
        try:
            return names_only(await jobs.start((req or TrainRequest()).model_dump()))
        except JobConflict as e:
            raise HTTPException(409, str(e)) from None
        except (TrainingDataError, DataError) as e:
            raise HTTPException(422, names_only_text(str(e))) from None

    @app.get("/v1/jobs")
    async def job_list():
        admin()
        return {"jobs": names_only(jobs.list())}

    @app.get("/v1/jobs/{job_id}")
    async def job(job_id: str):
        admin()
        try:
            return names_only(jobs.get(job_id))
        except KeyError:
            raise HTTPException(404, f"no job {job_id!r}") from None

    @app.get("/v1/jobs/{job_id}/log", response_class=PlainTextResponse)
    async def job_log(job_id: str):
        admin()
        try:
            return names_only_text((jobs.folder(job_id) / "train.log").read_text(encoding="utf-8", errors="replace"))
        except (KeyError, OSError):
            raise HTTPException(404, f"no log for job {job_id!r}") from None

    @app.delete("/v1/jobs/{job_id}")
    async def cancel(job_id: str):
        admin()
        try:
            return names_only(await jobs.cancel(job_id))
        except KeyError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        except JobConflict as e:
            raise HTTPException(409, str(e)) from None

    return jobs
