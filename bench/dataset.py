"""Deterministic bench data: templated memories, natural-language questions, their vectors.

Everything comes from one seed (numpy's PCG64), so two runs with the same seed send the same
bytes. Two datasets:

- `scale_memories` / `scale_questions`: the 10k/100k sets. Sentences are built from people,
  places, topics and time phrases drawn with Zipf-like weights, so full text sees realistic
  word statistics (a few frequent names and words, a long tail). Vectors are client-supplied
  384-dim unit vectors with structure: person + topic + place directions plus noise, so a
  question about (person, topic) has true near neighbours, as real embeddings do, rather than
  the structureless worst case of uniform random vectors.
- `quality_dataset`: facts with exactly one answer each and paraphrased questions, for
  recall@k with the real model. Its people never appear in the scale sentences, so the
  background memories add noise but no competing answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

import numpy as np

DIM = 384
YEAR_START = datetime(2025, 1, 1, tzinfo=UTC)
YEAR_SECONDS = 365 * 24 * 3600

PEOPLE = [
    "Caroline", "Melanie", "John", "Maria", "Deborah", "Jolene", "Evan", "Sam", "Nate", "Joanna",
    "Tim", "Audrey", "Andrew", "Calvin", "Dave", "Gina", "Jon", "Maya", "James", "Priya",
    "Tomas", "Aisha", "Liam", "Sofia", "Kenji", "Fatima", "Oliver", "Elena", "Marcus", "Ingrid",
    "Rafael", "Chloe", "Dmitri", "Hannah", "Yusuf", "Grace", "Pedro", "Nadia", "Owen", "Leila",
    "Victor", "Rosa", "Ben", "Mei", "Arjun", "Clara", "Hugo", "Zara", "Felix", "Ruth",
    "Isaac", "Naomi", "Diego", "Freya", "Omar", "Lucy", "Ravi", "Alma", "Theo", "Iris",
]  # fmt: skip

PLACES = [
    "in Lisbon", "in Berlin", "at the farmers market", "at the community center", "in Portland",
    "at the office", "at the downtown library", "in Central Park", "at the lake house",
    "in Boston", "at the coffee shop on Main", "in Seattle", "at the art studio",
    "at the climbing gym", "in Madrid", "at the hospital", "at the beach", "in Chicago",
    "at the school gym", "in the old town", "in Toronto", "at the bakery", "at the train station",
    "in Austin", "at the museum", "on the riverside trail", "in Denver", "at the co-working space",
    "at city hall", "in Kyoto", "at the campground", "at the music hall", "in Dublin",
    "at the rooftop bar", "at the warehouse", "at the data center", "in the cafeteria",
    "in Nairobi", "in the garden", "in Oslo",
]  # fmt: skip

# topic: (verb phrases for statements, question templates, tags)
TOPICS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "support group": (
        ["went to the LGBTQ support group", "shared a personal story at the support group",
         "volunteered to run the support group meeting"],
        ["When did {p} go to the support group?", "What did {p} share at the support group?"],
        ["community", "wellbeing"],
    ),
    "pottery": (
        ["signed up for a pottery class", "made a blue clay bowl in pottery class",
         "glazed three mugs at the pottery studio"],
        ["What did {p} make in the pottery class?", "When did {p} start doing pottery?"],
        ["hobby", "art"],
    ),
    "running": (
        ["ran a charity 5K", "went for a long run along the river",
         "started training for the autumn marathon"],
        ["How is {p}'s marathon training going?", "Did {p} run the charity race?"],
        ["sport", "health"],
    ),
    "camping": (
        ["went camping with the kids", "pitched a tent by the lake",
         "saw the meteor shower on a camping trip"],
        ["Where did {p} go camping?", "What did {p} see on the camping trip?"],
        ["outdoors", "family"],
    ),
    "painting": (
        ["painted a sunrise over the lake", "finished a large abstract painting",
         "sold a watercolor at the art fair"],
        ["What did {p} paint recently?", "Did {p} sell any paintings?"],
        ["art", "hobby"],
    ),
    "adoption": (
        ["met with the adoption agency", "finished the paperwork to adopt a child",
         "talked about becoming a foster parent"],
        ["What did {p} decide about adoption?", "When did {p} meet the adoption agency?"],
        ["family"],
    ),
    "job": (
        ["had a job interview", "got promoted to team lead",
         "handed in the quarterly report late"],
        ["How did {p}'s job interview go?", "When was {p} promoted?"],
        ["work", "career"],
    ),
    "moving": (
        ["moved into a new apartment", "packed the last boxes for the move",
         "signed the lease on a house"],
        ["Where did {p} move to?", "When did {p} sign the new lease?"],
        ["home"],
    ),
    "concert": (
        ["went to a jazz concert", "played violin at a small concert",
         "bought tickets for the summer music festival"],
        ["Which concert did {p} go to?", "Is {p} going to the music festival?"],
        ["music"],
    ),
    "book club": (
        ["hosted the book club", "recommended a mystery novel at book club",
         "finished reading a biography of Marie Curie"],
        ["What book did {p} recommend?", "Who hosted the book club last time?"],
        ["books"],
    ),
    "cooking": (
        ["cooked a Thai green curry", "baked sourdough bread for the first time",
         "tried a new lasagna recipe"],
        ["What did {p} cook for dinner?", "Has {p} tried baking bread?"],
        ["food"],
    ),
    "gardening": (
        ["planted tomatoes and basil", "built raised beds in the backyard",
         "harvested the first pumpkins of the season"],
        ["What is {p} growing in the garden?", "When did {p} plant the tomatoes?"],
        ["garden", "outdoors"],
    ),
    "volunteering": (
        ["volunteered at the animal shelter", "organized a food drive",
         "tutored kids at the after-school program"],
        ["Where does {p} volunteer?", "What did {p} organize for the food drive?"],
        ["community"],
    ),
    "doctor": (
        ["had a checkup with the doctor", "started physical therapy for a knee injury",
         "got the flu shot"],
        ["Why did {p} see the doctor?", "How is {p}'s knee recovering?"],
        ["health"],
    ),
    "birthday": (
        ["threw a surprise birthday party", "celebrated a fortieth birthday with friends",
         "forgot to buy a birthday present"],
        ["Whose birthday party did {p} plan?", "What did {p} do for the birthday?"],
        ["family", "friends"],
    ),
    "vacation": (
        ["booked a two-week vacation", "came back from a road trip along the coast",
         "went snorkeling on vacation"],
        ["Where did {p} go on vacation?", "When is {p}'s next trip?"],
        ["travel"],
    ),
    "database": (
        ["upgraded the staging database to PostgreSQL 16",
         "added an HNSW index to the embeddings table",
         "noticed slow queries on the reporting replica"],
        ["What did {p} change in the staging database?", "Why are the reports slow, per {p}?"],
        ["infra", "postgres"],
    ),
    "deploy": (
        ["rolled back the Friday deploy", "moved the service to the new Kubernetes cluster",
         "fixed the broken CI pipeline"],
        ["Why did {p} roll back the deploy?", "Who fixed the CI pipeline?"],
        ["infra", "release"],
    ),
    "customer": (
        ["had a call with the biggest customer about pricing",
         "promised the customer a fix by next sprint", "wrote up the customer's feature request"],
        ["What did {p} promise the customer?", "What did the customer ask {p} for?"],
        ["sales", "work"],
    ),
    "meeting": (
        ["decided in the planning meeting to drop the legacy API",
         "asked for a design review before the launch",
         "summarized the retrospective action items"],
        ["What was decided in the planning meeting?", "What did {p} ask for before launch?"],
        ["work", "decision"],
    ),
    "security": (
        ["rotated the API keys after the incident", "reported a phishing email",
         "enabled two-factor login for the admin accounts"],
        ["Why did {p} rotate the API keys?", "Who reported the phishing email?"],
        ["security"],
    ),
    "family": (
        ["visited grandma in the nursing home", "took the kids to the zoo",
         "helped a brother move furniture"],
        ["When did {p} visit grandma?", "Where did {p} take the kids?"],
        ["family"],
    ),
    "pets": (
        ["took the dog to the vet", "adopted a kitten from the shelter",
         "bought a new aquarium for the goldfish"],
        ["What pet did {p} adopt?", "Why did {p} go to the vet?"],
        ["pets"],
    ),
    "school": (
        ["enrolled in an evening course on statistics", "passed the certification exam",
         "gave a guest lecture at the university"],
        ["What course did {p} enroll in?", "Did {p} pass the exam?"],
        ["learning"],
    ),
}  # fmt: skip
TOPIC_NAMES = list(TOPICS)

WHEN = [
    "last weekend", "yesterday", "on Friday evening", "this morning", "last month",
    "two weeks ago", "on Sunday", "after work", "during the holidays", "on a lunch break",
    "on a day off", "before the meeting", "in the afternoon", "late at night",
]  # fmt: skip

FEELINGS = [
    "and felt proud of it", "and said it was exhausting but worth it", "and loved every minute",
    "and wants to do it again soon", "but was a bit nervous", "and told everyone about it",
    "and found it surprisingly relaxing", "though it rained the whole time",
    "with a couple of friends", "and took lots of photos",
]  # fmt: skip

STATEMENT_FORMS = [
    "{p} {verb} {place} {when}.",
    "{p} {verb} {when} {feeling}.",
    "{when_cap}, {p} {verb} {place}.",
    "{p} told {p2} that they {verb} {place} {when}.",
    "{p} and {p2} {verb} together {when}.",
    "According to {p2}, {p} {verb} {when} {feeling}.",
    "Note: {p} {verb} {place}; follow up with {p2} about it.",
]  # fmt: skip

TYPES = ["fact", "event", "event", "event", "preference", "decision", "conversation"]


def _zipf_weights(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@dataclass
class ScaleSpace:
    """The latent directions every scale vector is built from."""

    person: np.ndarray
    topic: np.ndarray
    place: np.ndarray

    @classmethod
    @lru_cache(maxsize=4)
    def create(cls, seed: int) -> ScaleSpace:
        rng = np.random.default_rng([seed, 1])
        return cls(_unit(rng, len(PEOPLE)), _unit(rng, len(TOPICS)), _unit(rng, len(PLACES)))


@dataclass
class ScaleMemories:
    contents: list[str]
    types: list[str]
    importance: np.ndarray  # float, 0..10
    tags: list[list[str]]
    created_at: list[datetime]
    vectors: np.ndarray  # (n, DIM) float32, unit rows
    person: np.ndarray  # latent indices of each memory
    topic: np.ndarray
    place: np.ndarray


def scale_memories(seed: int, n: int, offset: int = 0) -> ScaleMemories:
    """n memories; the stream is seeded by (seed, offset) so extra pools never repeat the set."""
    rng = np.random.default_rng([seed, 2, offset])
    space = ScaleSpace.create(seed)
    person = rng.choice(len(PEOPLE), size=n, p=_zipf_weights(len(PEOPLE), 0.9))
    person2 = rng.choice(len(PEOPLE), size=n, p=_zipf_weights(len(PEOPLE), 0.9))
    topic = rng.choice(len(TOPICS), size=n, p=_zipf_weights(len(TOPICS), 0.7))
    place = rng.choice(len(PLACES), size=n, p=_zipf_weights(len(PLACES), 0.8))
    verb_i = rng.integers(0, 3, size=n)
    form = rng.integers(0, len(STATEMENT_FORMS), size=n)
    when = rng.integers(0, len(WHEN), size=n)
    feeling = rng.integers(0, len(FEELINGS), size=n)
    type_i = rng.integers(0, len(TYPES), size=n)
    # In time order, as memories arrive: index i is the i-th memory written. (Random times
    # in load order scattered every week over the whole table, a layout no append-mostly
    # service has and that TimescaleDB's chunks rule out.)
    seconds = np.sort(rng.integers(0, YEAR_SECONDS, size=n))
    importance = np.round(np.clip(rng.gamma(2.0, 1.2, size=n), 0, 10), 1)

    contents, types, tags, created = [], [], [], []
    for i in range(n):
        t = TOPIC_NAMES[topic[i]]
        verbs, _, topic_tags = TOPICS[t]
        w = WHEN[when[i]]
        p2 = PEOPLE[person2[i]] if person2[i] != person[i] else "the team"
        contents.append(
            STATEMENT_FORMS[form[i]].format(
                p=PEOPLE[person[i]],
                p2=p2,
                verb=verbs[verb_i[i]],
                place=PLACES[place[i]],
                when=w,
                when_cap=w[0].upper() + w[1:],
                feeling=FEELINGS[feeling[i]],
            )
        )
        types.append(TYPES[type_i[i]])
        tags.append(list(topic_tags))
        created.append(YEAR_START + timedelta(seconds=int(seconds[i])))

    # Every memory new: a repeated (type, content) would be a duplicate under the service's
    # default dedupe (`exact`), stored as a reinforcement of the first, not as a memory
    # (781 of 100,000 repeat one before them). A repeat gets its number: "... (2)".
    seen: dict[tuple[str, str], int] = {}
    for i, key in enumerate(zip(types, contents, strict=True)):
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            contents[i] = f"{contents[i]} ({seen[key]})"
    noise = rng.standard_normal((n, DIM)).astype(np.float32) * np.float32(0.055)
    vectors = (
        space.person[person] * np.float32(1.0)
        + space.topic[topic] * np.float32(1.0)
        + space.place[place] * np.float32(0.45)
        + noise
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return ScaleMemories(
        contents, types, importance, tags, created, vectors.astype(np.float32), person, topic, place
    )


def fresh_vectors(seed: int, count: int, draw: int) -> np.ndarray:
    """`count` new vectors drawn like the loaded ones (same latent weights, fresh noise).

    Every add in the bench inserts vectors never inserted before, spread over the whole
    space as the loaded data is: re-inserting a vector already in the HNSW graph is cheaper
    than a new one, and piling near-copies into the same few clusters gets dearer with each
    phase; either would favour whichever of service and floor ran first or second."""
    rng = np.random.default_rng([seed, 5, draw])
    space = ScaleSpace.create(seed)
    person = rng.choice(len(PEOPLE), size=count, p=_zipf_weights(len(PEOPLE), 0.9))
    topic = rng.choice(len(TOPICS), size=count, p=_zipf_weights(len(TOPICS), 0.7))
    place = rng.choice(len(PLACES), size=count, p=_zipf_weights(len(PLACES), 0.8))
    noise = rng.standard_normal((count, DIM)).astype(np.float32) * np.float32(0.055)
    v = space.person[person] + space.topic[topic] + space.place[place] * np.float32(0.45) + noise
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@dataclass
class Questions:
    texts: list[str]
    vectors: np.ndarray  # (n, DIM) float32
    now: list[datetime] = field(default_factory=list)  # a point inside the data year


def scale_questions(seed: int, n: int, draw: int = 0) -> Questions:
    """Natural-language questions about (person, topic) pairs, with aligned query vectors.

    `draw` > 0 gives another set of questions over the same latent space (the same people and
    topics as the memories of `seed`)."""
    rng = np.random.default_rng([seed, 3] if draw == 0 else [seed, 3, draw])
    space = ScaleSpace.create(seed)
    person = rng.choice(len(PEOPLE), size=n, p=_zipf_weights(len(PEOPLE), 0.9))
    topic = rng.choice(len(TOPICS), size=n, p=_zipf_weights(len(TOPICS), 0.7))
    form = rng.integers(0, 2, size=n)
    days = rng.integers(14, 365, size=n)
    texts = [
        TOPICS[TOPIC_NAMES[topic[i]]][1][form[i]].format(p=PEOPLE[person[i]]) for i in range(n)
    ]
    noise = rng.standard_normal((n, DIM)).astype(np.float32) * np.float32(0.055)
    vectors = space.person[person] + space.topic[topic] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = [YEAR_START + timedelta(days=int(d), hours=12) for d in days]
    return Questions(texts, vectors.astype(np.float32), now)


# --- quality: facts with one known answer each, and paraphrased questions ---------------------

QUALITY_PEOPLE = [
    "Beatrix Okafor", "Cosimo Lindqvist", "Delphine Araujo", "Emeka Hartley", "Florian Nakamura",
    "Giselle Petrov", "Horatio Mbeki", "Imogen Castellanos", "Jasper Oyelaran", "Katya Brennan",
    "Lorcan Adeyemi", "Marisol Eriksen", "Nikolai Fairbanks", "Odette Kowalczyk", "Percival Ndlovu",
    "Quentin Albescu", "Rosalind Vukovic", "Severin Obi", "Tamsin Delacroix", "Ulrich Mwangi",
    "Valentina Holm", "Wendell Iwasaki", "Ximena Thorne", "Yannick Osei", "Zuzana Penhaligon",
    "Anselm Quarshie", "Bettina Ravel", "Crispin Achebe", "Dagny Ferreira", "Evander Szabo",
    "Fenella Okonkwo", "Gideon Marchetti", "Hestia Lindgren", "Ignatius Baptiste", "Juno Halvorsen",
    "Kasimir Nwosu", "Leocadia Brandt", "Mordecai Ilunga", "Nerys Valdez", "Octavian Yilmaz",
]  # fmt: skip

# relation: (fact template, question paraphrases, slot values). The questions avoid the fact's
# wording where a person would (relocate vs moved, employed vs job), so lexical and semantic
# strategies differ the way they do on real agent traffic.
RELATIONS: dict[str, tuple[str, list[str], list[str]]] = {
    "pet": (
        "{p} adopted a {v} from the local animal shelter last month.",
        ["Which animal did {p} bring home recently?", "Does {p} have a pet?"],
        ["beagle puppy", "grey tabby cat", "pair of rabbits", "parrot", "rescue greyhound",
         "tortoise", "husky mix", "ginger kitten"],
    ),
    "job": (
        "{p} started a new job as a {v}.",
        ["What does {p} do for a living?", "Where is {p} employed now?"],
        ["nurse at the children's hospital", "data engineer at a fintech startup",
         "high school chemistry teacher", "pastry chef at a hotel", "civil engineer for the city",
         "paramedic", "product designer at a game studio", "bookkeeper for a law firm"],
    ),
    "move": (
        "{p} moved to {v} to be closer to family.",
        ["Which city did {p} relocate to?", "Where does {p} live these days?"],
        ["Lisbon", "Vancouver", "Edinburgh", "Melbourne", "Montreal", "Cape Town", "Prague",
         "Valparaiso"],
    ),
    "instrument": (
        "{p} has been taking {v} lessons every Tuesday evening.",
        ["What instrument is {p} learning to play?", "Is {p} studying any music?"],
        ["cello", "saxophone", "piano", "drum", "banjo", "trumpet", "harp", "flute"],
    ),
    "allergy": (
        "{p} is allergic to {v}, so we always order without it.",
        ["What food does {p} have to avoid?", "Does {p} have any dietary restrictions?"],
        ["peanuts", "shellfish", "sesame", "gluten", "eggs", "strawberries", "soy", "walnuts"],
    ),
    "trip": (
        "{p} spent two weeks hiking in {v} in September.",
        ["Where did {p} go on holiday?", "Which country did {p} travel to for trekking?"],
        ["Patagonia", "Nepal", "the Scottish Highlands", "Norway", "Peru", "New Zealand",
         "the Dolomites", "Iceland"],
    ),
    "book": (
        "{p} finished reading {v} and recommended it to the book club.",
        ["Which novel did {p} suggest to the readers' group?", "What was {p}'s latest read?"],
        ["The Left Hand of Darkness", "Middlemarch", "Beloved", "The Remains of the Day",
         "Pachinko", "Dune", "Anna Karenina", "Never Let Me Go"],
    ),
    "charity": (
        "{p} ran a half marathon to raise money for {v}.",
        ["What cause did {p} fundraise for?", "Why did {p} take part in the race?"],
        ["the children's hospice", "cancer research", "the local food bank",
         "refugee families", "the animal rescue", "clean water projects", "mental health services",
         "the homeless shelter"],
    ),
    "support group": (
        "{p} went to the {v} support group on Tuesday.",
        ["When did {p} go to the support group?", "What kind of support meetings does {p} attend?"],
        ["grief", "LGBTQ", "new parents", "addiction recovery", "caregivers", "veterans",
         "chronic pain", "anxiety"],
    ),
    "car": (
        "{p} bought a used {v} because the old one broke down.",
        ["What vehicle did {p} purchase?", "What does {p} drive now?"],
        ["Toyota Corolla", "Volvo estate", "electric hatchback", "pickup truck", "Honda Civic",
         "camper van", "Subaru Outback", "Mini Cooper"],
    ),
    "team": (
        "{p} is a lifelong fan of {v} and never misses a game.",
        ["Which sports club does {p} support?", "What team does {p} cheer for?"],
        ["the Chicago Cubs", "Liverpool", "the Boston Celtics", "Boca Juniors", "the Green Bay "
         "Packers", "Ajax", "the New Zealand All Blacks", "Real Madrid"],
    ),
    "degree": (
        "{p} graduated with a degree in {v}.",
        ["What did {p} study at university?", "What is {p}'s academic background?"],
        ["marine biology", "art history", "mechanical engineering", "philosophy",
         "economics", "linguistics", "nursing", "astrophysics"],
    ),
    "fear": (
        "{p} is terrified of {v} and avoids them at all costs.",
        ["What is {p} afraid of?", "Does {p} have any phobias?"],
        ["spiders", "heights", "snakes", "deep water", "crowds", "clowns", "thunderstorms",
         "needles"],
    ),
    "birthday": (
        "{p}'s birthday is on {v}, and a party is planned.",
        ["When does {p} celebrate turning a year older?", "What date is {p}'s birthday?"],
        ["March 3", "July 19", "October 8", "January 27", "May 14", "December 2", "August 30",
         "April 11"],
    ),
    "kids": (
        "{p} has {v} and coaches their soccer team on weekends.",
        ["How many children does {p} have?", "Does {p} have a family?"],
        ["two daughters", "three sons", "one son", "twins", "a daughter and a son", "four kids",
         "a stepdaughter", "two teenage boys"],
    ),
}  # fmt: skip


@dataclass
class QualityDataset:
    facts: dict[str, str]  # key -> content
    background: list[str]
    queries: list[tuple[str, str]]  # (question, key of the one answer)


def quality_dataset(seed: int, people: int, background: int) -> QualityDataset:
    """One fact per (person, relation); one paraphrased question per fact."""
    rng = np.random.default_rng([seed, 4])
    facts: dict[str, str] = {}
    queries: list[tuple[str, str]] = []
    for pi, person in enumerate(QUALITY_PEOPLE[:people]):
        for ri, (relation, (template, questions, values)) in enumerate(RELATIONS.items()):
            key = f"q-{pi:02d}-{relation.replace(' ', '-')}"
            value = values[int(rng.integers(len(values)))]
            facts[key] = template.format(p=person, v=value)
            q = questions[(pi + ri) % len(questions)]
            queries.append((q.format(p=person), key))
    bg = scale_memories(seed, background, offset=7).contents
    return QualityDataset(facts, bg, queries)


def distinct_questions(seed: int, n: int) -> list[str]:
    """n different questions in the scale questions' style: the (person, topic, form)
    questions, alone or about one of the places ("When did Maria go to the support group in
    Lisbon?"), in a seeded order without repeats (some templates name no person, so a little
    under 88,560 of them). For recall with the model in the loop: a text the service has not
    embedded before cannot come from its query cache."""
    combos = len(PEOPLE) * len(TOPICS) * 2 * (len(PLACES) + 1)
    seen: dict[str, None] = {}
    for c in np.random.default_rng([seed, 12]).permutation(combos).tolist():
        c, place = divmod(c, len(PLACES) + 1)
        c, form = divmod(c, 2)
        person, topic = divmod(c, len(TOPICS))
        q = TOPICS[TOPIC_NAMES[topic]][1][form].format(p=PEOPLE[person])
        seen[q if place == len(PLACES) else f"{q[:-1]} {PLACES[place]}?"] = None
        if len(seen) == n:
            return list(seen)
    raise ValueError(f"only {len(seen)} distinct questions, {n} asked")
