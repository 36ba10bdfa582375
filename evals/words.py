"""The vocabulary of the conversational set: speakers, the values facts are drawn from, and
the small talk between them.

Fact statements avoid the category words their paraphrase questions use ("pet", "animal",
"relocate", "employer", "abroad", ...), so a paraphrase question and its evidence share at
most the speaker's name (the generator checks it; tests/evals re-checks it).
"""

from __future__ import annotations

# (name, possessive pronoun, object pronoun); every dialogue gets two, never reused.
SPEAKERS = [
    ("Mia", "her", "her"), ("Leo", "his", "him"), ("Priya", "her", "her"),
    ("Tomas", "his", "him"), ("Hannah", "her", "her"), ("Kwame", "his", "him"),
    ("Sofia", "her", "her"), ("Declan", "his", "him"), ("Aiko", "her", "her"),
    ("Rafael", "his", "him"), ("Nadia", "her", "her"), ("Owen", "his", "him"),
    ("Ingrid", "her", "her"), ("Mateo", "his", "him"), ("Chloe", "her", "her"),
    ("Yusuf", "his", "him"), ("Greta", "her", "her"), ("Dev", "his", "him"),
    ("Lena", "her", "her"), ("Marcus", "his", "him"), ("Farah", "her", "her"),
    ("Jonah", "his", "him"), ("Elif", "her", "her"), ("Callum", "his", "him"),
]  # fmt: skip

# --- fact values ------------------------------------------------------------------------------

# species: (breeds as said in conversation)
PETS = {
    "dog": ["beagle puppy", "rescue greyhound", "scruffy terrier mix", "golden retriever puppy",
            "three-legged corgi", "border collie"],
    "cat": ["tabby kitten", "grey Maine Coon", "one-eyed rescue tabby", "tiny black kitten",
            "fluffy Ragdoll"],
    "rabbit": ["lop-eared bunny", "pair of bunnies"],
    "parakeet": ["green budgie"],
    "tortoise": ["little Greek tortoise"],
}  # fmt: skip
PET_NAMES = [
    "Biscuit", "Pickles", "Mochi", "Juniper", "Waffles", "Ziggy", "Noodle", "Clementine",
    "Pretzel", "Tofu", "Marzipan", "Pistachio", "Gizmo", "Dumpling", "Bramble", "Fennel",
    "Nutmeg", "Sprocket", "Custard", "Wobbles", "Pepperoni", "Quincy", "Saffron", "Kiwi",
]  # fmt: skip

ROLES = [
    "data analyst", "pediatric nurse", "UX designer", "chemistry teacher", "structural engineer",
    "sous chef", "paralegal", "product manager", "physiotherapist", "backend developer",
    "logistics coordinator", "veterinary technician", "grant writer", "sound engineer",
    "pharmacist", "urban planner",
]  # fmt: skip
COMPANIES = [
    "Fennwick Analytics", "Quorra Labs", "Brightwater Logistics", "Halvorsen & Pike",
    "Tidemark Health", "Orrin Biotech", "Nimbletree Software", "Kestrel Dynamics",
    "Vantablue Studio", "Marrowfield Hospital", "Pellucid Systems", "Ashgrove Academy",
    "Corvane Insurance", "Luminel Foods", "Stoatley Partners", "Gossamer Robotics",
    "Thornbury Council", "Wexley Pharma", "Oriel Acoustics", "Sablecrest Bank",
]  # fmt: skip

CODENAMES = [
    "Zephyrine-7", "Obsidian Heron", "Kallisto-2", "Marigold-12", "Tessellate", "Quokka-3",
    "Halcyon-9", "Bluefin Ledger", "Nightjar", "Vesper-21", "Cobalt Finch", "Amaranth-4",
    "Lodestar-5", "Pangolin", "Saltmarsh", "Orrery-8", "Wintergreen", "Kestrel Loop",
    "Mistral-6", "Basalt", "Peregrine-11", "Tamarind", "Glasswing", "Umber-3",
]  # fmt: skip
PROJECTS = [
    "the billing migration", "the new patient portal", "rewriting the warehouse scheduler",
    "the grading system overhaul", "moving everything to the new data center",
    "the mobile app relaunch", "the loyalty card program", "replacing the old phone system",
    "the fraud model retraining", "the website redesign",
]  # fmt: skip
INCIDENTS = [
    "the payment queue backed up for two hours", "the VPN certificate expired at midnight",
    "the nightly backup had silently failed for a week", "someone deleted a production DNS record",
    "the checkout page started timing out", "a disk filled up on the main database",
    "every printer in the building went offline", "the login service kept rejecting passwords",
]  # fmt: skip

CITIES = [
    "Lisbon", "Rotterdam", "Tucson", "Halifax", "Leeds", "Bergen", "Adelaide", "Asheville",
    "Ljubljana", "Valencia", "Duluth", "Wellington", "Porto", "Ghent", "Boise", "Tallinn",
    "Aarhus", "Savannah", "Hobart", "Galway", "Kraków", "Quebec City", "Bilbao", "Missoula",
]  # fmt: skip
STREETS = [
    "Marlowe Lane", "Quillfeather Street", "Ashcombe Road", "Penhallow Avenue",
    "Birchwood Crescent", "Tamsin Row", "Okonedo Close", "Larkspur Terrace", "Wyvern Street",
    "Calloway Court", "Fenwick Mews", "Harrowgate Drive", "Pelham Rise", "Greyfriars Walk",
    "Tolliver Place", "Bellingham Way", "Coppice Lane", "Ravensworth Road", "Dunmore Street",
    "Kittiwake Close", "Merriweather Avenue", "Sorrel Gardens", "Abernethy Row", "Lindqvist Lane",
]  # fmt: skip

# name, the word a user would say ("start pottery"), statements, paraphrase questions
HOBBIES = [
    ("pottery", "pottery",
     ["signed up for a wheel-throwing class at the clay studio, first session was tonight",
      "made my first lopsided bowl on the wheel, clay everywhere"],
     ["Has {p} taken up ceramics?", "Is {p} into any crafts these days?"]),
    ("climbing", "climbing",
     ["went bouldering for the first time, my forearms are dead",
      "tried bouldering with a coworker and I'm hooked, I bought chalk and shoes"],
     ["Has {p} tried rock climbing?", "Does {p} scale walls for fun?"]),
    ("running", "running",
     ["started the couch-to-5K plan, week one done and my lungs hate me",
      "did my first 5K loop around the park without stopping"],
     ["Is {p} into jogging?", "Has {p} been training for races?"]),
    ("sourdough", "baking sourdough",
     ["my starter finally doubled and I baked my first loaf, it's a bit dense but edible",
      "named my starter Doughlores and baked two loaves this morning"],
     ["Does {p} make bread?", "Has {p} gotten into baking?"]),
    ("knitting", "knitting",
     ["finished the first sleeve of my first sweater, the yarn is so soft",
      "taught myself to cast on from videos, currently making a very wonky scarf"],
     ["Has {p} gotten into needlework?", "Does {p} make any clothes by hand?"]),
    ("birdwatching", "birdwatching",
     ["bought binoculars and spotted a kingfisher at the reservoir at dawn",
      "joined the Saturday dawn walk with the ornithology society, saw a heron"],
     ["Has {p} picked up a wildlife hobby?", "Does {p} watch birds?"]),
    ("chess", "playing chess",
     ["joined a chess club that meets Thursdays, lost all four games",
      "I've been doing chess puzzles on my phone every lunch break"],
     ["Does {p} compete at board games?", "Is {p} into any strategy games?"]),
    ("salsa", "salsa dancing",
     ["took my first salsa class, stepped on everyone's toes",
      "went to a salsa social on Friday, I actually kept the rhythm"],
     ["Has {p} been taking dance lessons?", "Does {p} go dancing?"]),
    ("gardening", "gardening",
     ["planted tomatoes and basil in the raised beds, fingers crossed",
      "spent all Sunday digging out a vegetable patch behind the house"],
     ["Is {p} growing any plants?", "Does {p} have a green thumb?"]),
    ("film photography", "film photography",
     ["bought a secondhand film camera and shot my first roll at the harbour",
      "got my first roll developed, half of it is blurry but I love it"],
     ["Has {p} picked up taking pictures?", "Is {p} into cameras?"]),
]  # fmt: skip

INSTRUMENTS = [
    "ukulele", "cello", "piano", "drums", "violin", "trumpet", "saxophone", "harmonica",
    "mandolin", "bass guitar", "flute", "accordion",
]  # fmt: skip
INSTRUMENT_LINES = [
    "started {i} lessons with a teacher down the street, Wednesday evenings",
    "my {i} arrived today, I've already annoyed the neighbours",
    "I've been practicing {i} scales every night, my fingers hurt",
    "signed up for beginner {i} at the community college",
]  # fmt: skip
INSTRUMENT_PARAPHRASES = [
    "Is {p} musical?", "Does {p} play any music?", "Has {p} been learning to play something?",
]  # fmt: skip

# city, country, landmark
TRIPS = [
    ("Kyoto", "Japan", "the bamboo forest in Arashiyama"), ("Reykjavik", "Iceland",
     "the Blue Lagoon"), ("Oaxaca", "Mexico", "the mezcal distillery"), ("Marrakech", "Morocco",
     "the souks"), ("Hanoi", "Vietnam", "the street food tour"), ("Cape Town", "South Africa",
     "Table Mountain"), ("Cusco", "Peru", "the Sacred Valley"), ("Edinburgh", "Scotland",
     "Arthur's Seat"), ("Istanbul", "Turkey", "the Grand Bazaar"), ("Tbilisi", "Georgia",
     "the sulfur baths"), ("Queenstown", "New Zealand", "the bungee bridge"), ("Seville",
     "Spain", "the Alcázar gardens"), ("Hoi An", "Vietnam", "the lantern festival"),
    ("Bergamo", "Italy", "the old walled town"), ("Chiang Mai", "Thailand",
     "the night bazaar"), ("Porto Alegre", "Brazil", "the riverside sunset"),
]  # fmt: skip
# as said, and the question asked about it ({pos}: the speaker's possessive pronoun)
TRIP_REASONS = [
    ("my cousin's wedding", "Where did {p}'s cousin get married?"),
    ("a work conference", "Where was the conference {p} attended?"),
    ("a week with my college friends", "Where did {p} go with {pos} old college friends?"),
    ("my parents' anniversary", "Where did {p} celebrate {pos} parents' anniversary?"),
    ("my best friend's fortieth", "Where was {p}'s best friend's fortieth birthday?"),
]  # fmt: skip
TRIP_LINES = [
    "just got back from {reason} in {city}! The day at {landmark} was unreal",
    "landed last night. {reason} in {city} was incredible, we went to {landmark} twice",
    "I'm writing this from {city}, we're here for {reason}. Tomorrow it's {landmark}",
]  # fmt: skip
TRIP_PARAPHRASES = [
    "Has {p} been abroad lately?", "Did {p} take any vacations overseas?",
    "Has {p} traveled internationally?",
]  # fmt: skip

SISTERS = [
    "Ottoline", "Rosalind", "Ione", "Philippa", "Wilhelmina", "Seraphina", "Perpetua",
    "Marguerite", "Henrietta", "Clementina",
]  # fmt: skip
BROTHERS = [
    "Thaddeus", "Barnaby", "Casimir", "Leopold", "Evander", "Augustin", "Ignatius", "Cornelius",
    "Lysander", "Bartholomew",
]  # fmt: skip
SIBLING_JOBS = [
    "an air traffic controller", "a wildlife vet", "a tax auditor", "a ferry captain",
    "a museum archivist", "a firefighter", "a midwife", "a patent attorney", "a stonemason",
    "a radio producer",
]  # fmt: skip

ALLERGENS = ["shellfish", "peanuts", "sesame", "kiwi", "walnuts", "mustard", "celery"]
INJURIES = [
    ("ankle", "sprained my ankle stepping off a curb"),
    ("wrist", "fractured my wrist falling off my bike"),
    ("knee", "tore a ligament in my knee at five-a-side"),
    ("shoulder", "dislocated my shoulder reaching for a box"),
    ("back", "threw out my back lifting the couch"),
]  # fmt: skip
DOCTORS = [
    "Abernathy-Vos", "Okonkwo", "Lindqvist", "Farrow-Baines", "Castellano", "Mbatha",
    "Ishikawa", "Delacourt", "Varga", "Sørensen", "Achterberg", "Quintero",
]  # fmt: skip

# category, item as said, brand (a rare token for `names` questions)
PURCHASES = [
    ("car", "a used 2014 Subaru Outback", "Subaru Outback"),
    ("car", "a secondhand Volvo V70", "Volvo V70"),
    ("bike", "a Brompton folding bike", "Brompton"),
    ("espresso machine", "a Gaggia Classic", "Gaggia Classic"),
    ("camera", "a Fujifilm X100V", "Fujifilm X100V"),
    ("sofa", "a green velvet Chesterfield from a flea market", "Chesterfield"),
    ("kayak", "an inflatable Itiwit kayak", "Itiwit"),
    ("e-reader", "a Kobo Libra", "Kobo Libra"),
    ("tent", "a Hilleberg Nallo tent", "Hilleberg Nallo"),
    ("blender", "a Vitamix", "Vitamix"),
    ("motorbike", "a Royal Enfield Himalayan", "Royal Enfield"),
    ("piano", "a Yamaha upright", "Yamaha upright"),
]  # fmt: skip
PURCHASE_LINES = [
    "I finally did it, I bought {item}!",
    "picked up {item} off a guy on Marketplace for half price",
    "guess who's the proud owner of {item} as of this afternoon",
]  # fmt: skip
PURCHASE_PARAPHRASES = [
    "Did {p} splurge on anything recently?", "What was {p}'s latest big expense?",
    "Has {p} spent serious money on something?",
]  # fmt: skip

# --- small talk -------------------------------------------------------------------------------

SLOTS = {
    "food": ["leftover curry", "a sad desk salad", "tacos", "ramen", "pho", "a giant burrito",
             "pancakes", "grilled cheese", "pad thai", "lentil soup", "frozen pizza",
             "my mom's dumplings"],
    "show": ["that baking show", "the new detective series", "a documentary about octopuses",
             "old sitcom reruns", "the football highlights", "a cooking competition",
             "a true crime podcast", "the space drama everyone is talking about"],
    "chore": ["laundry", "cleaning the bathroom", "meal prep", "paying bills",
              "fixing the leaky tap", "grocery shopping", "vacuuming", "sorting the recycling"],
    "weather": ["pouring rain", "freezing", "really humid", "sunny for once", "so windy",
                "grey and drizzly", "weirdly warm", "foggy all day"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "drink": ["coffee", "tea", "oat latte", "smoothie", "iced coffee", "matcha"],
    "someone": ["my neighbour", "my boss", "my mom", "a coworker", "my landlord",
                "the barista", "my cousin", "my old roommate"],
    "place": ["the store", "the gym", "the pharmacy", "the post office", "the bakery",
              "the library", "the park", "the hardware store"],
}  # fmt: skip

OPENERS = [
    "Hey {other}! How's your week going?", "Hi! Did you survive {today}?",
    "Hi hi, long time no chat!", "Hey, got a minute? Work is finally quiet.",
    "Happy {today}! What are you up to?", "Hey you. Today has been a day.",
    "Hey! Are you free to chat for a bit?", "Hi! Sorry I went quiet, it's been a week.",
]  # fmt: skip
GREETING_REPLIES = [
    "Hey! Pretty good, just tired.", "Hi! Yes, finally sitting down.", "Hey! Barely, haha.",
    "Hi!! Good to hear from you.", "Hey, all good here. You?", "Hello! Just got home from work.",
]  # fmt: skip
# a question and the answers that fit it
SMALL_QUESTIONS = [
    ("How was your weekend?", ["Pretty quiet, mostly {chore} and {show}.",
     "Not bad! Went to {place} and had {food}.", "Way too short, as always."]),
    ("Any plans for the weekend?", ["Nothing yet, probably {chore}.",
     "{someone} wants to get brunch, so maybe that.", "Sleeping. That's the plan."]),
    ("How's work been?", ["Good, busy though.", "Ugh, don't ask. Meetings all day.",
     "Work was fine, long but fine.", "Quiet this week, which I'll take."]),
    ("Did you sleep at all last night?", ["Honestly, barely. I went to bed at two.",
     "Like a rock for once.", "Not really, {someone} texted me at midnight."]),
    ("What did you have for dinner?", ["Had {food}, it was great.", "Just {food}, nothing fancy.",
     "Cereal. Don't judge me."]),
    ("Are you watching anything good?", ["Just started watching {show}, it's pretty good.",
     "Rewatching {show} for the third time.", "Nothing, I keep scrolling and giving up."]),
    ("How's the weather over there?", ["It's {weather} here, so not much.",
     "{weather}, as usual.", "Actually nice today!"]),
    ("Are you going to the gym today?", ["I'm going to try, we'll see.", "Already went! Go me.",
     "Ha. No."]),
    ("Did you go out on {day}?", ["Yes! Went to {place} and then had {food}.",
     "No, stayed in with {show}.", "Briefly, it was {weather} so we came back early."]),
    ("How's your mom doing?", ["Better, thanks for asking.", "Same as ever, she says hi!",
     "Good! She's obsessed with {show} now."]),
    ("What are you doing tonight?", ["{chore}, sadly.", "Making {food} and going to bed early.",
     "Nothing at all and I can't wait."]),
    ("Busy day at work today?", ["So busy, I ate {food} at my desk.",
     "Kind of, it was a weird day.", "Not really, I left on time."]),
    ("Did you get your {drink} yet?", ["Yes! Finally.", "Not yet, the line was huge.",
     "Two already, don't tell anyone."]),
    ("Is it still {weather} where you are?", ["Yep, all week apparently.",
     "No, it cleared up this afternoon.", "Worse, honestly."]),
    ("Did you end up going to {place}?", ["Yes, and I forgot the one thing I needed.",
     "No, tomorrow maybe.", "Yep, quick trip."]),
]  # fmt: skip
SMALL_STATEMENTS = [
    "Work was nonstop today, I didn't even get lunch until three.",
    "I need to go to bed earlier, I keep staying up watching {show}.",
    "Today was {weather} so I just stayed in.", "Had {food} for dinner, zero regrets.",
    "I'm so tired, this week has been a lot.", "The weekend went by way too fast.",
    "I finally did the {chore}, feels good.", "Traffic on the way to work was brutal again.",
    "My {drink} order got messed up this morning, not a great start.",
    "{someone} wants to go for drinks on {day}, not sure I have the energy.",
    "I was going to go for a walk but it's {weather}.",
    "Spent the whole weekend on {chore} and {show}, very glamorous.",
    "I had to go to {place} twice today because I forgot my wallet the first time.",
    "Honestly I just want a quiet weekend.", "Today I worked from the kitchen table all day.",
    "I've had three coffees and it's not even noon.", "Going to try to go to bed before eleven.",
    "Work is fine, just a lot of meetings this week.", "It's {weather} again, of course.",
    "{someone} called for an hour today, I love them but wow.",
    "I'm going to make {food} tonight, I think.",
    "Started watching {show} last night, it's pretty good.",
    "We went to {place} and then just wandered around for a while.",
    "My phone died halfway through the day, it was weirdly peaceful.",
    "Long day. Going to go lie on the couch and do nothing.",
    "I keep meaning to go to the gym and then I just don't.",
    "Work was quieter today, I actually left on time.",
    "Grabbed {food} from the place near work, it was fine.",
    # generic mentions of the fact categories: distractors for keyword and vector search
    "My neighbour's dog barked all night again.",
    "Saw a cute cat in the window of the bookshop today.",
    "A coworker is moving to another city next month, so there's a farewell lunch on {day}.",
    "Someone at work bought a new car and won't stop talking about it.",
    "I keep saying I'll learn an instrument someday.",
    "My cousin keeps sending me vacation pictures, I'm jealous.",
    "The project at work is behind again, as usual.",
    "Had a check-up at the dentist, all fine.",
    "Our team got a new manager today, seems nice enough.",
    "I walked past the pottery place near the station again, one day.",
    "My knee has been a bit stiff, probably the cold.",
    "Thinking about getting a plant for the office.",
]  # fmt: skip
REACTIONS = [
    "Haha same.", "Ugh, I feel that.", "Oh nice!", "That sounds like a good day honestly.",
    "lol", "Fair enough.", "Honestly same here.", "Wait really?", "Sounds relaxing.", "Oof.",
    "Good for you!", "Tell me about it.", "Classic.", "Ha, of course.", "Respect.",
    "That's the dream.", "Hmm, yeah.", "Oh no, haha.",
]  # fmt: skip
CLOSERS = [
    ("Anyway, I should go, talk soon!", "Bye! Talk soon."),
    ("Gotta run, have a good night!", "You too, night!"),
    ("OK going to bed, night!", "Night night."),
    ("Talk tomorrow?", "Yes! Bye!"),
    ("I have to go make dinner, catch you later.", "Later! Enjoy."),
]  # fmt: skip
LEAD_INS = [
    "So what's new with you?", "Any news on your end?", "How have you been, really?",
    "Tell me something good.", "What's been going on with you?",
]  # fmt: skip

# per fact category: what the other speaker says back (never repeating the fact's words)
FACT_REACTIONS = {
    "good": ["No way, congrats!!", "That's huge, I'm so happy for you.", "Amazing! You deserve it.",
             "Wow, OK, tell me everything.", "That's so exciting!"],
    "cute": ["Aww, I need pictures immediately.", "Stop, that's adorable.",
             "Oh my god, send photos!"],
    "bad": ["Oh no, I'm so sorry. Rest up.", "Ugh, that sounds awful.",
            "Ouch. Take care of yourself."],
    "neutral": ["Oh interesting!", "Ha, nice.", "That sounds fun.", "Ooh, good for you.",
                "Look at you!"],
    "plain": ["Ha, fair.", "Sounds about right.", "Oh I remember you saying.", "Mhm."],
    "family": ["Aww, say hi from me!", "Oh that's lovely.", "Ha, love that."],
}  # fmt: skip
FOLLOW_UPS = [
    ("How's the little one settling in?", "So well, sleeping through the night now."),
    ("How's the new place treating you?", "Good! Still a few boxes to unpack."),
    ("How's the new job going?", "Good so far, lots to learn."),
    ("Still keeping up with your new hobby?", "Trying to! Twice a week at least."),
    ("How's the recovery going?", "Slowly, a bit better every week."),
]  # fmt: skip

# --- the harder kinds (evals/harder.py) -------------------------------------------------------

# synonym: the same event said with other words (each template shares no content word with
# the turn it asks about but the speaker's name; checked when the set is generated)
PET_SYNONYMS = {
    "dog": ["Did {p} get a dog?", "Is there a new hound in {p}'s home?"],
    "cat": ["Did {p} get a cat?", "Is there a new kitty in {p}'s home?"],
    "rabbit": ["Did {p} get a rabbit?", "Is there a new hare-like pet in {p}'s home?"],
    "parakeet": ["Did {p} get a pet bird?", "Is there a parrot living with {p}?"],
    "tortoise": ["Did {p} get a pet turtle?", "Is there a reptile living with {p}?"],
}
# keyed by words of the move line's template
MOVE_SYNONYMS = {
    "signed the lease": ["Did {p} rent an apartment?",
                         "Has {p} put {pos} name on a rental contract?"],
    "boxes everywhere": ["Is {p} unpacking cartons after relocating?",
                         "Has {p} settled into a different town?"],
    "the van is booked": ["Has {p} hired a removal truck?", "Has {p} arranged a moving lorry?"],
}  # fmt: skip
INJURY_SYNONYMS = {
    "ankle": "Did {p} twist {pos} foot on the pavement?",
    "wrist": "Did {p} break a bone in a cycling crash?",
    "knee": "Did {p} rip a tendon playing football?",
    "shoulder": "Did {p} pop {pos} arm out of its socket?",
    "back": "Did {p} strain {pos} spine moving furniture?",
}
ALLERGEN_SYNONYMS = {
    "shellfish": "prawns and crab", "peanuts": "groundnuts", "sesame": "tahini",
    "kiwi": "kiwifruit", "walnuts": "tree nuts", "mustard": "dijon", "celery": "celeriac",
}  # fmt: skip
ALLERGY_SYNONYMS = [
    "Did a specialist tell {p} to stop eating {x}?",
    "Does {x} give {p} a skin reaction?",
]
PURCHASE_SYNONYMS = {
    "Subaru Outback": "a secondhand station wagon", "Volvo V70": "a pre-owned estate car",
    "Brompton": "a collapsible bicycle", "Gaggia Classic": "a coffee maker",
    "Fujifilm X100V": "a compact digital camera", "Chesterfield": "an antique couch",
    "Itiwit": "a blow-up canoe", "Kobo Libra": "an ebook reader",
    "Hilleberg Nallo": "a backpacking shelter", "Vitamix": "a high-speed food mixer",
    "Royal Enfield": "an adventure motorcycle", "Yamaha upright": "a piano for the lounge",
}  # fmt: skip
PURCHASE_SYNONYM_QUESTIONS = ["Did {p} buy {x}?", "Has {p} acquired {x}?"]
INSTRUMENT_SYNONYMS = {
    "ukulele": "the uke", "cello": "the violoncello", "piano": "the keyboard",
    "drums": "percussion", "violin": "the fiddle", "trumpet": "a brass horn",
    "saxophone": "the sax", "harmonica": "the mouth organ", "mandolin": "a small lute",
    "bass guitar": "a four-string electric", "flute": "a woodwind",
    "accordion": "the squeezebox",
}  # fmt: skip
INSTRUMENT_SYNONYM_QUESTIONS = [
    "Is {p} learning to play {x}?",
    "Has {p} begun practising {x}?",
]
TRIP_REASON_SYNONYMS = {
    "my cousin's wedding": "a relative's marriage ceremony",
    "a work conference": "a business convention",
    "a week with my college friends": "a reunion with university pals",
    "my parents' anniversary": "a celebration for mum and dad",
    "my best friend's fortieth": "a close pal's 40th birthday",
}
TRIP_SYNONYM_QUESTIONS = ["Did {p} go to {country} for {x}?", "Was {p} in {country} for {x}?"]
